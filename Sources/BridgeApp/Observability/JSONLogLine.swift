import Foundation
import Logging
import Synchronization

/// The JSON format: one JSON object per event, one per line.
///
/// What goes into a line is what the call site logs: the bridge's own lines already shorten
/// tokens and never carry keys, tokens or payloads at info and above, in either format.
package enum JSONLogLine {
    /// One event as a JSON object on one line.
    package static func line(
        timestamp: Date,
        level: Logger.Level,
        label: String,
        message: String,
        metadata: Logger.Metadata,
        source: String
    ) -> String {
        var object: [String: Any] = [
            "timestamp": Self.timestamp(timestamp),
            "level": level.rawValue,
            "label": label,
            "message": message,
            "source": source,
        ]
        if !metadata.isEmpty {
            object["metadata"] = metadata.mapValues { "\($0)" }
        }
        // JSONSerialization escapes the C0 control characters, so a value can never break the
        // line; DEL, the C1 controls and the Unicode line separators, which JSON allows as they
        // are but some log viewers take for line breaks, are escaped here.
        guard
            let data = try? JSONSerialization.data(
                withJSONObject: object,
                options: [.sortedKeys, .withoutEscapingSlashes]
            )
        else {
            return #"{"level":"error","message":"a log line could not be encoded"}"#
        }
        let line = String(decoding: data, as: UTF8.self)
        guard line.unicodeScalars.contains(where: Self.mayPassForLineBreak) else { return line }
        var escaped = ""
        for scalar in line.unicodeScalars {
            if Self.mayPassForLineBreak(scalar) {
                escaped += String(format: "\\u%04X", scalar.value)
            } else {
                escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped
    }

    private static func mayPassForLineBreak(_ scalar: Unicode.Scalar) -> Bool {
        (0x7F...0x9F).contains(scalar.value) || scalar.value == 0x2028 || scalar.value == 0x2029
    }

    private static func timestamp(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))  // 2026-11-24T12:34:56.789Z
    }
}

import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The text format (the default): one human-readable line per event, in the layout of
/// swift-log's `StreamLogHandler` (`TIME LEVEL LABEL: key=value … [SOURCE] MESSAGE`), with every
/// logged value escaped so that it cannot break its line (``BridgeLogHandler`` writes it).
///
/// Much of what the bridge logs comes from outside: certificate subjects, topics, file names
/// from the configuration, reasons and GOAWAY data from the upstream. A newline in one of them
/// would otherwise start a line of the attacker's choosing (a forged `critical` entry, say).
/// ``LogLineEscaping`` writes control characters as escapes; the JSON format escapes them by
/// itself.
package enum TextLogLine {
    /// One event as one line (without its newline).
    package static func line(
        timestamp: String,
        level: Logger.Level,
        label: String,
        message: String,
        metadata: Logger.Metadata,
        source: String
    ) -> String {
        var line = "\(timestamp) \(level)"
        if !label.isEmpty {
            line += " " + LogLineEscaping.escaped(label)
        }
        line += ":"
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            line += " " + LogLineEscaping.escaped(key) + "=" + LogLineEscaping.escaped("\(value)")
        }
        line += " [" + LogLineEscaping.escaped(source) + "] " + LogLineEscaping.escaped(message)
        return line
    }

    /// Local time, as `StreamLogHandler` writes it: `2026-11-25T14:53:43+0000`.
    static func timestamp() -> String {
        var now = time(nil)
        var parts = tm()
        guard localtime_r(&now, &parts) != nil else { return "<unknown>" }
        var buffer = [CChar](repeating: 0, count: 64)
        let length = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S%z", &parts)
        return String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

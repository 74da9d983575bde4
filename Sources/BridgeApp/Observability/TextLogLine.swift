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
public enum TextLogLine {
    /// One event as one line (without its newline).
    public static func line(
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

/// Escapes what could break a log line or pass for a line break: the C0 control characters
/// (`\n`, `\r` and `\t` by name, the others as `\u{XX}`), DEL, the C1 control characters
/// (NEL among them), and the Unicode line and paragraph separators. A backslash is doubled, so
/// an escape in the output always stands for a character that was escaped. Invalid UTF-8 never
/// reaches a `String` (decoding replaces it with U+FFFD).
public enum LogLineEscaping {
    public static func escaped(_ text: String) -> String {
        // The common case, nothing to escape, costs one scan and no copy.
        guard text.unicodeScalars.contains(where: Self.needsEscape) else { return text }
        var result = ""
        result.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": result += "\\n"
            case "\r": result += "\\r"
            case "\t": result += "\\t"
            case "\\": result += "\\\\"
            case _ where Self.needsEscape(scalar):
                result += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00...0x1F, 0x7F...0x9F, 0x2028, 0x2029, 0x5C: true
        default: false
        }
    }
}

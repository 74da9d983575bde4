import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Escapes what could break a log line or pass for a line break: the C0 control characters
/// (`\n`, `\r` and `\t` by name, the others as `\u{XX}`), DEL, the C1 control characters
/// (NEL among them), the Unicode line and paragraph separators, and the bidirectional controls
/// (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), which can make a terminal or a log
/// viewer show the rest of a line reversed. A backslash is doubled, so
/// an escape in the output always stands for a character that was escaped. Invalid UTF-8 never
/// reaches a `String` (decoding replaces it with U+FFFD).
package enum LogLineEscaping {
    package static func escaped(_ text: String) -> String {
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
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }
}

import BridgeApp
import Foundation
import Logging
import Testing

/// Logs that cannot be forged: a value from outside (a certificate subject, a
/// topic, a file name, an upstream reason) never breaks its line, in either log format.
@Suite("Log lines cannot be forged")
struct LogEscapingTests {
    /// Every C0 control character, DEL, a C1 one (NEL), the Unicode line separator, and bytes that
    /// are not UTF-8 (decoded as a String the way every logged value is).
    static let hostile: String = {
        var value = "UID=com.example"
        for code in 0x00...0x1F {
            value.unicodeScalars.append(Unicode.Scalar(UInt8(code)))
        }
        value += "\u{7F}\u{85}\u{2028}"
        value += String(decoding: [0xC3, 0x28, 0xFF, 0xFE, 0xED, 0xA0, 0x80], as: UTF8.self)
        value += "\n2026-11-25T00:00:00+0000 critical apns-bridge: [BridgeApp] forged"
        return value
    }()

    static func singleLine(_ line: String) -> Bool {
        !line.unicodeScalars.contains { scalar in
            (0x00...0x1F).contains(scalar.value) || (0x7F...0x9F).contains(scalar.value) || scalar.value == 0x2028
                || scalar.value == 0x2029
        }
    }

    @Test("Text format: every control character in a message, a label, a metadata key or value is escaped")
    func text() {
        let line = TextLogLine.line(
            timestamp: "2026-11-25T00:00:00+0000",
            level: .warning,
            label: "apns-bridge" + Self.hostile,
            message: "refusing a client certificate: " + Self.hostile,
            metadata: ["reason": "\(Self.hostile)", Self.hostile: "key"],
            source: "BridgeServer"
        )
        #expect(Self.singleLine(line))
        #expect(line.hasPrefix("2026-11-25T00:00:00+0000 warning apns-bridge"))
        #expect(
            line.contains(#"\n2026-11-25T00:00:00+0000 critical"#),
            "the forged line is there, escaped, inside the real one"
        )
        #expect(
            line.contains(#"\u{0}\u{1}"#) && line.contains(#"\t\n\u{B}"#) && line.contains(#"\u{7F}\u{85}\u{2028}"#)
        )
        #expect(line.contains("\u{FFFD}"), "invalid UTF-8 arrives as replacement characters")
        #expect(
            TextLogLine.line(timestamp: "t", level: .info, label: "l", message: #"a\nb"#, metadata: [:], source: "s")
                == #"t info l: [s] a\\nb"#,
            "a backslash is doubled, so an escape is never ambiguous"
        )
        #expect(
            TextLogLine.line(
                timestamp: "t",
                level: .info,
                label: "l",
                message: "plain",
                metadata: ["k": "v"],
                source: "s"
            ) == "t info l: k=v [s] plain"
        )
    }

    @Test("JSON format: the same values stay inside one JSON object on one line")
    func json() throws {
        let line = JSONLogLine.line(
            timestamp: Date(timeIntervalSince1970: 1_800_000_000),
            level: .warning,
            label: "apns-bridge",
            message: "refusing a client certificate: " + Self.hostile,
            metadata: ["reason": "\(Self.hostile)"],
            source: "BridgeServer"
        )
        #expect(Self.singleLine(line))
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(
            object["message"] as? String == "refusing a client certificate: " + Self.hostile,
            "escaped, not altered"
        )
    }
}

import NIOCore

/// HTTP/2 frames as a server writes them, byte for byte (RFC 9113 §4.1): for the libnghttp2
/// engine's tests and its fuzzer's seeds. Header blocks are HPACK literals without indexing,
/// with new names (RFC 7541 §6.2.2), so no table state is needed to read them.
package enum ServerFrames {
    package static let data: UInt8 = 0x0
    package static let headers: UInt8 = 0x1
    package static let rstStream: UInt8 = 0x3
    package static let settings: UInt8 = 0x4
    package static let ping: UInt8 = 0x6
    package static let goAway: UInt8 = 0x7
    package static let endStream: UInt8 = 0x1
    package static let endHeaders: UInt8 = 0x4
    package static let ack: UInt8 = 0x1

    /// One frame: the 9-byte header, then the payload.
    package static func frame(type: UInt8, flags: UInt8 = 0, stream: UInt32 = 0, payload: [UInt8] = []) -> [UInt8] {
        let length = UInt32(payload.count)
        var bytes: [UInt8] = [
            UInt8(truncatingIfNeeded: length >> 16), UInt8(truncatingIfNeeded: length >> 8),
            UInt8(truncatingIfNeeded: length), type, flags,
        ]
        bytes += Self.uint32(stream & 0x7FFF_FFFF)
        return bytes + payload
    }

    /// SETTINGS with `(identifier, value)` entries (3 is MAX_CONCURRENT_STREAMS).
    package static func settings(_ entries: [(UInt16, UInt32)] = []) -> [UInt8] {
        var payload: [UInt8] = []
        for (identifier, value) in entries {
            payload += [UInt8(identifier >> 8), UInt8(identifier & 0xFF)] + Self.uint32(value)
        }
        return Self.frame(type: Self.settings, payload: payload)
    }

    package static func settingsAcknowledged() -> [UInt8] {
        Self.frame(type: Self.settings, flags: Self.ack)
    }

    /// An answer's header block: `:status` and the given fields.
    package static func answerHeaders(
        stream: UInt32,
        status: Int,
        fields: [(String, String)] = [],
        endStream: Bool
    ) -> [UInt8] {
        var block: [UInt8] = []
        for (name, value) in [(":status", String(status))] + fields {
            block += [0x00] + Self.string(name) + Self.string(value)
        }
        return Self.frame(
            type: Self.headers,
            flags: Self.endHeaders | (endStream ? Self.endStream : 0),
            stream: stream,
            payload: block
        )
    }

    package static func data(stream: UInt32, _ body: String, endStream: Bool = true) -> [UInt8] {
        Self.frame(type: Self.data, flags: endStream ? Self.endStream : 0, stream: stream, payload: Array(body.utf8))
    }

    /// A whole answer: 200 with `apns-id`, or an error status with APNs' JSON reason.
    package static func answer(stream: UInt32, status: Int, reason: String? = nil) -> [UInt8] {
        let id = (
            "apns-id", "00000000-0000-4000-8000-\(String(repeating: "0", count: 12 - String(stream).count))\(stream)"
        )
        guard let reason else {
            return Self.answerHeaders(stream: stream, status: status, fields: [id], endStream: true)
        }
        return Self.answerHeaders(
            stream: stream,
            status: status,
            fields: [id, ("content-type", "application/json")],
            endStream: false
        )
            + Self.data(stream: stream, #"{"reason":"\#(reason)"}"#)
    }

    package static func resetStream(_ stream: UInt32, code: UInt32) -> [UInt8] {
        Self.frame(type: Self.rstStream, stream: stream, payload: Self.uint32(code))
    }

    package static func goAway(lastStream: UInt32, code: UInt32 = 0, debug: String = "") -> [UInt8] {
        Self.frame(type: Self.goAway, payload: Self.uint32(lastStream) + Self.uint32(code) + Array(debug.utf8))
    }

    package static func pingAcknowledged(_ opaque: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 1]) -> [UInt8] {
        Self.frame(type: Self.ping, flags: Self.ack, payload: opaque)
    }

    private static func uint32(_ value: UInt32) -> [UInt8] {
        [
            UInt8(value >> 24), UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 8),
            UInt8(truncatingIfNeeded: value),
        ]
    }

    /// An HPACK string literal, not Huffman-coded, its length as a 7-bit prefix integer.
    private static func string(_ text: String) -> [UInt8] {
        let bytes = Array(text.utf8)
        var encoded: [UInt8] = []
        if bytes.count < 127 {
            encoded.append(UInt8(bytes.count))
        } else {
            encoded.append(127)
            var rest = bytes.count - 127
            while rest >= 128 {
                encoded.append(UInt8(rest & 0x7F) | 0x80)
                rest >>= 7
            }
            encoded.append(UInt8(rest))
        }
        return encoded + bytes
    }
}

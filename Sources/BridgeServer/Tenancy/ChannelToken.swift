import Crypto
import NIOCore

/// Channel tokens made from channel ids, for operators who have none yet.
///
/// A channel token is what a legacy provider stores in its device table to reach a Live
/// Activity channel: 32 bytes, like a device token. The derived one is the SHA-256 of a fixed
/// label, the tenant's name and the channel id, so that the same channel gives the same token
/// every time (`apns-bridge channels token` prints it), and two tenants never share one.
public enum ChannelToken {
    /// The derived token of a channel for a tenant.
    public static func derive(tenant: String, channelID: String) -> ByteBuffer {
        var hasher = SHA256()
        hasher.update(data: Array("apns-bridge channel token v1".utf8))
        hasher.update(data: [0])
        hasher.update(data: Array(tenant.utf8))
        hasher.update(data: [0])
        hasher.update(data: Array(channelID.utf8))
        return ByteBuffer(bytes: Array(hasher.finalize()))
    }

    /// Lowercase hex, as the configuration and the legacy software's device table hold it.
    public static func hex(_ token: ByteBuffer) -> String {
        token.readableBytesView.map { String($0 >> 4, radix: 16) + String($0 & 0x0F, radix: 16) }.joined()
    }

    /// 64 hex digits → 32 bytes; `nil` for anything else.
    public static func parse(hex text: String) -> ByteBuffer? {
        let digits = Array(text.utf8)
        guard digits.count == 64 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        var index = 0
        while index < digits.count {
            guard let high = Self.nibble(digits[index]), let low = Self.nibble(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return ByteBuffer(bytes: bytes)
    }

    /// Whether a channel id is what APNs issues: non-empty standard base64.
    public static func isValidChannelID(_ id: String) -> Bool {
        guard !id.isEmpty, id.utf8.count <= 1024, id.utf8.count % 4 == 0 else { return false }
        let body = id.utf8.prefix { $0 != UInt8(ascii: "=") }
        guard id.utf8.count - body.count <= 2, id.utf8.dropFirst(body.count).allSatisfy({ $0 == UInt8(ascii: "=") }) else { return false }
        return body.allSatisfy { byte in
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "/")
        }
    }

    private static func nibble(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

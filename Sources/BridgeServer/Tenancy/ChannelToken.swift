import Crypto
import NIOCore

/// Channel tokens made from channel ids, for operators who have none yet.
///
/// A channel token is what a legacy provider stores in its device table to reach a Live
/// Activity channel: 32 bytes, like a device token. The derived one is the SHA-256 of a fixed
/// label, the tenant's name and the channel id, so that the same channel gives the same token
/// every time (`apns-bridge channels token` prints it), and two tenants never share one.
package enum ChannelToken {
    /// The derived token of a channel for a tenant.
    package static func derive(tenant: String, channelID: String) -> ByteBuffer {
        var hasher = SHA256()
        hasher.update(data: Array("apns-bridge channel token v1".utf8))
        hasher.update(data: [0])
        hasher.update(data: Array(tenant.utf8))
        hasher.update(data: [0])
        hasher.update(data: Array(channelID.utf8))
        return ByteBuffer(bytes: Array(hasher.finalize()))
    }

    /// Lowercase hex, as the configuration and the legacy software's device table hold it.
    package static func hex(_ token: ByteBuffer) -> String {
        token.hexDump(format: .compact)
    }

    /// 64 hex digits → 32 bytes; `nil` for anything else.
    package static func parse(hex text: String) -> ByteBuffer? {
        var token = ByteBuffer()
        guard text.utf8.count == 64, (try? token.writePlainHexEncodedBytes(text)) == 32 else { return nil }
        return token
    }

    /// Whether a channel id is what APNs issues: non-empty standard base64, padded. (Written out:
    /// Foundation's `Data(base64Encoded:)` on Linux accepts `====` and over-long padding.)
    package static func isValidChannelID(_ id: String) -> Bool {
        guard !id.isEmpty, id.utf8.count <= 1024, id.utf8.count % 4 == 0 else { return false }
        let body = id.utf8.prefix { $0 != UInt8(ascii: "=") }
        guard id.utf8.count - body.count <= 2, id.utf8.dropFirst(body.count).allSatisfy({ $0 == UInt8(ascii: "=") })
        else { return false }
        return body.allSatisfy { byte in
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "+")
                || byte == UInt8(ascii: "/")
        }
    }
}

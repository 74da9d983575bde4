import LegacyProtocol
import NIOCore

/// What identifies a resent notification (docs/protocol.md#resend-records): the tenant, the token, the payload
/// digest and the priority.
///
/// The identifier and the expiry are deliberately not part of it: real clients change both
/// when they resend (some renumber the rebuilt batch from 0 or 1, some compute "now + 1 day"
/// again). Two identical notifications make two records with the same key; each is used once.
public struct ResendRecordKey: Hashable, Sendable, CustomStringConvertible {
    public var tenant: String
    public var deviceToken: ByteBuffer
    public var payloadDigest: PayloadDigest
    public var priority: UInt8

    public init(tenant: String, deviceToken: ByteBuffer, payloadDigest: PayloadDigest, priority: UInt8) {
        self.tenant = tenant
        self.deviceToken = deviceToken
        self.payloadDigest = payloadDigest
        self.priority = priority
    }

    /// Shortened: the first 4 bytes of the token only.
    public var description: String {
        let head =
            self.deviceToken.getSlice(at: self.deviceToken.readerIndex, length: min(4, self.deviceToken.readableBytes))
            ?? ByteBuffer()
        return "\(self.tenant)/\(head.hexDump(format: .compact))…/p\(self.priority)"
    }
}

import LegacyProtocol
import NIOCore

/// The SHA-256 of a notification's payload, kept in resend records instead of the payload.
public struct PayloadDigest: Hashable, Sendable {
    public var bytes: (UInt64, UInt64, UInt64, UInt64)

    public init(bytes: (UInt64, UInt64, UInt64, UInt64)) {
        self.bytes = bytes
    }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.bytes == rhs.bytes
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.bytes.0)
        hasher.combine(self.bytes.1)
        hasher.combine(self.bytes.2)
        hasher.combine(self.bytes.3)
    }
}

/// What identifies a resent notification (CONTRACT §1.6): the tenant, the identifier bytes,
/// the token, the payload digest and the expiry.
public struct ResendRecordKey: Hashable, Sendable, CustomStringConvertible {
    public var tenant: String
    public var identifier: NotificationIdentifier
    public var expiration: UInt32
    public var deviceToken: ByteBuffer
    public var payloadDigest: PayloadDigest

    public init(
        tenant: String,
        identifier: NotificationIdentifier,
        expiration: UInt32,
        deviceToken: ByteBuffer,
        payloadDigest: PayloadDigest
    ) {
        self.tenant = tenant
        self.identifier = identifier
        self.expiration = expiration
        self.deviceToken = deviceToken
        self.payloadDigest = payloadDigest
    }

    /// Shortened: the first 4 bytes of the token only.
    public var description: String {
        let head = self.deviceToken.getSlice(at: self.deviceToken.readerIndex, length: min(4, self.deviceToken.readableBytes)) ?? ByteBuffer()
        return "\(self.tenant)/\(self.identifier)/\(head.hexDump(format: .compact))…"
    }
}

/// A notification that was forwarded after the one an error-response (or a status-10 packet)
/// names, so the provider will resend it; `outcome` is `nil` while the upstream has not answered.
public struct ResendRecord: Hashable, Sendable {
    public var key: ResendRecordKey
    public var outcome: NotificationOutcome?

    public init(key: ResendRecordKey, outcome: NotificationOutcome?) {
        self.key = key
        self.outcome = outcome
    }
}

/// Where resend records live (CONTRACT §1.6): an in-memory store for one process, and durable
/// ones shared by several instances.
///
/// Records are kept for a bounded window; each is used once.
public protocol ResendRecordStore: Sendable {
    /// Remembers records. The future completes once they are stored, so the caller can write
    /// the error-response only after a resend would be recognised.
    func remember(_ records: [ResendRecord], on eventLoop: any EventLoop) -> EventLoopFuture<Void>

    /// Sets the outcome of the oldest pending record with this key (or of a claim waiting for it).
    func resolve(_ key: ResendRecordKey, outcome: NotificationOutcome, on eventLoop: any EventLoop) -> EventLoopFuture<Void>

    /// Takes the oldest unexpired record with this key. The future carries its outcome (waiting
    /// for it while the record is pending), or `nil` when there is no record: then the
    /// notification is new and must be forwarded.
    func claim(_ key: ResendRecordKey, on eventLoop: any EventLoop) -> EventLoopFuture<NotificationOutcome?>
}

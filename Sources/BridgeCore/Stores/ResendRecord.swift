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

/// A notification that was forwarded after the one an error-response (or a status-10 packet)
/// names, so the provider will resend it; `outcome` is `nil` while the upstream has not answered.
///
/// Only an answer APNs gave is kept (``NotificationOutcome/isUpstreamAnswer``): an outcome the
/// bridge decided itself (`gaveUp`, `dropped`) leaves the record's outcome unknown.
public struct ResendRecord: Hashable, Sendable {
    public var key: ResendRecordKey
    public var outcome: NotificationOutcome?

    public init(key: ResendRecordKey, outcome: NotificationOutcome?) {
        self.key = key
        self.outcome = outcome
    }
}

/// Where resend records live (docs/protocol.md#resend-records): an in-memory store for one process, and durable
/// ones shared by several instances.
///
/// Records are kept for a bounded window; each is used once.
public protocol ResendRecordStore: Sendable {
    /// Whether a live record of this tenant may exist, answered from memory (no I/O).
    ///
    /// `false` means the tenant's notifications are new: the caller computes no key and makes
    /// no claim (docs/protocol.md#resend-records: the normal path costs nothing). A store shared by several
    /// instances learns of the others' records through ``refreshLiveRecords(tenant:on:)``.
    func mayHoldLiveRecords(tenant: String) -> Bool

    /// Brings what ``mayHoldLiveRecords(tenant:)`` knows up to date with the store, for a
    /// provider connection of this tenant that is starting: one query at most, for stores
    /// shared by several instances; nothing for a store only this process writes.
    func refreshLiveRecords(tenant: String, on eventLoop: any EventLoop) -> EventLoopFuture<Void>

    /// Remembers records. The future completes once they are stored, so the caller can write
    /// the error-response only after a resend would be recognised.
    func remember(_ records: [ResendRecord], on eventLoop: any EventLoop) -> EventLoopFuture<Void>

    /// Sets the outcome of the oldest pending record with this key (or of a claim waiting for it).
    /// An outcome the bridge decided (``NotificationOutcome/isUpstreamAnswer`` is false) makes
    /// the record's outcome unknown.
    func resolve(
        _ key: ResendRecordKey,
        outcome: NotificationOutcome,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<Void>

    /// Takes the oldest unexpired record with this key. While the record is pending and the
    /// process that forwarded it is alive, the future waits for its outcome; once no outcome
    /// can arrive any more (that process is gone, or the bridge gave up on it), it answers
    /// ``ResendClaim/outcomeUnknown`` at once.
    func claim(_ key: ResendRecordKey, on eventLoop: any EventLoop) -> EventLoopFuture<ResendClaim>
}

/// What a claim found for a notification that may be a resend (docs/protocol.md#resend-records).
public enum ResendClaim: Hashable, Sendable, CustomStringConvertible {
    /// No live record: the notification is new; forward it.
    case new
    /// A resend of a notification APNs answered: report this outcome, send nothing.
    case answered(NotificationOutcome)
    /// A resend of a notification whose outcome can no longer arrive: the process that forwarded
    /// it stopped or crashed with it in flight, or the bridge gave up on it. Forward it again
    /// (at-least-once, as if there were no bridge); never wait, never invent a failure.
    case outcomeUnknown

    /// The claim of a record that holds `outcome`.
    public init(recorded outcome: NotificationOutcome) {
        self = outcome.isUpstreamAnswer ? .answered(outcome) : .outcomeUnknown
    }

    public var description: String {
        switch self {
        case .new: "new"
        case .answered(let outcome): "answered(\(outcome))"
        case .outcomeUnknown: "outcomeUnknown"
        }
    }
}

extension ResendRecordStore {
    /// A store that only this process writes knows its records already.
    public func refreshLiveRecords(tenant: String, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        eventLoop.makeSucceededVoidFuture()
    }
}

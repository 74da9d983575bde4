import LegacyProtocol
import NIOCore

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
    /// ``ResendClaim/outcomeUnknown(firstSentAs:)`` at once.
    func claim(_ key: ResendRecordKey, on eventLoop: any EventLoop) -> EventLoopFuture<ResendClaim>
}

import BridgeCore
import LegacyProtocol

/// The drain both stores run (see ``FeedbackStore/drain(tenant:environment:options:pollerConnected:deliver:finish:)``):
/// claim a batch, deliver it, repeat; after the last batch, `finish` (the close); then release
/// whatever is still claimed. The stores supply the claim and the release in their own SQL.
///
/// A claim first asks whether the poller is still connected, once it holds the connection its
/// statement runs on, and throws ``PollerGone`` if not. A claim can wait long for that
/// connection (a PostgreSQL that is down): when it is finally made, the poller may have been
/// closed for minutes, and a claim made then would hide its entries from the next poll until
/// the release.
///
/// Delivered batches (their bytes written and flushed) are deleted as the stream goes: every
/// ``batchesPerDelete`` batches, one statement by batch range in the same transaction as the
/// next claim, and the rest with the release. So the deletes keep pace with the stream, and a
/// poll that ended left nothing to delete. (With one delete of the whole list after the close,
/// a million entries took longer to delete than a graceful shutdown waits, and were served
/// again after the restart: docs/feedback.md, "When entries are deleted".)
enum FeedbackDrainLoop {
    /// Batches deleted by one statement. Each delete rewrites the index pages its rows touch
    /// (the tokens' unique index: random pages), so fewer, larger deletes cost less: a
    /// statement per batch made SQLite's stream of a million entries twice as slow as one
    /// per ten (docs/feedback.md).
    static let batchesPerDelete = 10

    /// Thrown by a claim whose poller went away before its statement ran: nothing was claimed.
    struct PollerGone: Error {}

    static func run(
        batchSize: Int,
        deliver: ([FeedbackTuple]) async throws -> Void,
        finish: () async -> Void,
        claim: (_ batch: Int, _ deleting: ClosedRange<Int>?) async throws -> [FeedbackTuple],
        release: (_ deleting: ClosedRange<Int>?) async throws -> Void
    ) async throws -> FeedbackDrainResult {
        var batch = 0
        var delivered = 0
        var completed = false
        /// Delivered batches not deleted yet.
        var undeleted: ClosedRange<Int>?
        var storeError: (any Error)?
        while true {
            batch += 1
            let deleting = (undeleted?.count ?? 0) >= Self.batchesPerDelete ? undeleted : nil
            let tuples: [FeedbackTuple]
            do {
                tuples = try await claim(batch, deleting)
                if deleting != nil { undeleted = nil }
            } catch is PollerGone {
                break  // nothing claimed, nothing deleted: the release below deletes
            } catch {
                storeError = error  // a failed claim deleted nothing: the release below does
                break
            }
            if tuples.isEmpty {
                completed = true
                break
            }
            do {
                try await deliver(tuples)
            } catch {
                break  // the poller is gone: what it got is deleted, the rest released
            }
            delivered += tuples.count
            undeleted = (undeleted?.lowerBound ?? batch)...batch
            if tuples.count < batchSize {
                completed = true
                break
            }
        }
        if completed {
            await finish()
        }
        try await release(undeleted)
        if let storeError { throw storeError }
        return FeedbackDrainResult(delivered: delivered, completed: completed)
    }
}

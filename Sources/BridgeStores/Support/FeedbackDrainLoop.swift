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
/// A claim or a release that fails is tried again within the outage budget, the claim only
/// while its poller is connected (docs/operations.md#store-outage): a store that went away for
/// a moment costs the poll a pause, not its list. A retried claim takes back what its failed
/// attempt may have claimed: the store's claim, given `retaking`, also takes the entries this
/// drain claimed in batches other than those it deletes.
///
/// Delivered batches (their bytes written and flushed) are deleted as the stream goes: every
/// ``batchesPerDelete`` batches, one statement by batch range in the same transaction as the
/// next claim, and the rest with the release. So the deletes keep pace with the stream, and a
/// poll that ended left nothing to delete. (With one delete of the whole list after the close,
/// a million entries took longer to delete than a graceful shutdown waits, and were served
/// again after the restart: docs/feedback.md, "When entries are deleted".)
package enum FeedbackDrainLoop {
    /// Batches deleted by one statement. Each delete rewrites the index pages its rows touch
    /// (the tokens' unique index: random pages), so fewer, larger deletes cost less: a
    /// statement per batch made SQLite's stream of a million entries twice as slow as one
    /// per ten (docs/feedback.md).
    static let batchesPerDelete = 10

    /// Thrown by a claim whose poller went away before its statement ran: nothing was claimed.
    package struct PollerGone: Error {
        package init() {}
    }

    package static func run(
        batchSize: Int,
        health: StoreHealth,
        retryWhile storeOpen: () -> Bool,
        outageBudget: Duration,
        pollerConnected: () -> Bool,
        deliver: ([FeedbackTuple]) async throws -> Void,
        finish: () async -> Void,
        claim: (_ batch: Int, _ deleting: ClosedRange<Int>?, _ retaking: Bool) async throws -> [FeedbackTuple],
        release: (_ deleting: ClosedRange<Int>?) async throws -> Void
    ) async throws -> FeedbackDrainResult {
        var batch = 0
        var delivered = 0
        var completed = false
        /// Delivered batches not deleted yet.
        var undeleted: ClosedRange<Int>?
        var storeError: (any Error)?
        claiming: while true {
            var deleting = (undeleted?.count ?? 0) >= Self.batchesPerDelete ? undeleted : nil
            let tuples: [FeedbackTuple]
            // A claim that fails (the store went away under it: a PostgreSQL restart ends its
            // connection, another writer locks the SQLite file, a statement past its timeout)
            // is tried again while the poller is connected, within the outage budget. A failed
            // attempt may have committed without its answer arriving: a retry deletes every
            // delivered batch and takes back, beside unclaimed entries, whatever else this drain
            // holds (`retaking`), under a batch number of its own. So a lost claim's entries are
            // delivered by the retry, never deleted as delivered without being sent. A failed
            // attempt whose statement commits only after the retry (PostgreSQL's SKIP LOCKED let
            // the retry pass its rows) keeps its own batch number, below every range deleted from
            // then on (the retry emptied `undeleted`): the release hands its entries back.
            let deadline = ContinuousClock.now + outageBudget
            var failures = 0
            while true {
                batch += 1
                do {
                    tuples = try await claim(batch, deleting, failures > 0)
                    if failures > 0 { health.succeeded() }
                    if deleting != nil { undeleted = nil }
                    break
                } catch is PollerGone {
                    break claiming  // nothing claimed, nothing deleted: the release below deletes
                } catch {
                    health.failed("feedback claim", error)
                    failures += 1
                    // The release below deletes what was delivered, and releases what a failed
                    // attempt may have claimed.
                    guard pollerConnected() else { break claiming }
                    guard storeOpen(), .now < deadline, !Task.isCancelled else {
                        storeError = error
                        break claiming
                    }
                    deleting = undeleted
                    try? await Task.sleep(for: StoreHealth.pause(afterFailures: failures))
                }
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
        // Within the outage budget too: a release that failed would hide the claimed entries
        // from every poll until the store's sweep (the claim lease).
        let deadline = ContinuousClock.now + outageBudget
        let keepTrying = { storeOpen() && ContinuousClock.now < deadline }
        try await health.retrying("feedback release", while: keepTrying) {
            try await release(undeleted)
        }
        if let storeError { throw storeError }
        return FeedbackDrainResult(delivered: delivered, completed: completed)
    }
}

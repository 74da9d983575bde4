import BridgeCore
import LegacyProtocol

/// The drain both stores run (see ``FeedbackStore/drain(tenant:environment:options:deliver:finish:)``):
/// claim a batch, deliver it, repeat; after the last batch, `finish` (the close); then settle:
/// delete the delivered batches and release the rest. The stores supply the claim and the
/// settlement in their own SQL.
enum FeedbackDrainLoop {
    static func run(
        batchSize: Int,
        deliver: ([FeedbackTuple]) async throws -> Void,
        finish: () async -> Void,
        claim: (_ batch: Int) async throws -> [FeedbackTuple],
        settle: (_ deliveredBatches: Int) async throws -> Void
    ) async throws -> FeedbackDrainResult {
        var batch = 0
        var delivered = 0
        var completed = false
        var storeError: (any Error)?
        while true {
            batch += 1
            let tuples: [FeedbackTuple]
            do {
                tuples = try await claim(batch)
            } catch {
                storeError = error
                break
            }
            if tuples.isEmpty {
                completed = true
                break
            }
            do {
                try await deliver(tuples)
            } catch {
                break  // the poller is gone: what it got is deleted when settling, the rest released
            }
            delivered += tuples.count
            if tuples.count < batchSize {
                completed = true
                break
            }
        }
        if completed {
            await finish()
        }
        // Every batch before the current one was delivered; the current one too if completed.
        try await settle(completed ? batch : batch - 1)
        if let storeError { throw storeError }
        return FeedbackDrainResult(delivered: delivered, completed: completed)
    }
}

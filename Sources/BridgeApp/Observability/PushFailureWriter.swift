import BridgeCore
import CoreMetrics
import Logging
import NIOCore

/// Copies the push log's failures to the store, where they last for `usage.retentionDays`
/// (docs/operations.md#did-it-go): every ``interval``, the failures recorded since the last
/// copy, in writes of at most ``batchLimit``. An accepted notification is never written. While
/// the store does not answer, the failures wait in the push log (``PushLog/keepsFailuresForStore``,
/// up to `pushLog.entries` of them) and the next copy tries again; what the bound dropped is
/// counted (`apns_bridge_push_log_unstored_total`) and logged.
package final class PushFailureWriter: Sendable {
    /// How often the failures are copied.
    package static let interval: Duration = .seconds(5)
    /// The most failures one write takes; a copy makes as many writes as it needs.
    package static let batchLimit = 2_000

    private let pushLog: PushLog
    private let store: any PushFailureStore
    private let logger: Logger
    private let stored: CoreMetrics.Counter
    private let unstored: CoreMetrics.Counter

    package init(
        pushLog: PushLog,
        store: any PushFailureStore,
        logger: Logger,
        metricsFactory: any MetricsFactory = MetricsSystem.factory
    ) {
        precondition(pushLog.keepsFailuresForStore, "the push log keeps no failures for the store")
        self.pushLog = pushLog
        self.store = store
        self.logger = logger
        self.stored = CoreMetrics.Counter(label: "apns_bridge_push_log_stored_total", factory: metricsFactory)
        self.unstored = CoreMetrics.Counter(label: "apns_bridge_push_log_unstored_total", factory: metricsFactory)
    }

    /// Writes every failure waiting; returns how many were written. At the first write the
    /// store refuses, the rest go back to the push log for the next copy.
    @discardableResult
    package func copy() async -> Int {
        let (failures, dropped) = self.pushLog.takeUnstoredFailures()
        if dropped > 0 {
            self.unstored.increment(by: Int64(clamping: dropped))
            self.logger.warning(
                "push log failures dropped before they reached the store",
                metadata: ["failures": "\(dropped)", "pushLog.entries": "\(self.pushLog.capacity)"]
            )
        }
        var start = failures.startIndex
        var written = 0
        while start != failures.endIndex {
            let end =
                failures.index(start, offsetBy: Self.batchLimit, limitedBy: failures.endIndex) ?? failures.endIndex
            let batch = failures[start..<end].map {
                StoredPushFailure($0, run: self.pushLog.run, receivedMilliseconds: PushLog.receivedMilliseconds(of: $0))
            }
            do {
                try await self.store.recordPushFailures(batch)
            } catch {
                self.logger.warning(
                    "could not write the push log's failures to the store; the next copy tries again",
                    metadata: [
                        "failures": "\(failures.distance(from: start, to: failures.endIndex))", "error": "\(error)",
                    ]
                )
                self.pushLog.putBackUnstoredFailures(failures[start...])
                return written
            }
            self.stored.increment(by: Int64(batch.count))
            written += batch.count
            start = end
        }
        return written
    }
}

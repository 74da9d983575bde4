import CoreMetrics
import Logging
import Synchronization

/// Whether the store answers, as the store's own work finds it (docs/operations.md#store-outage):
/// every write that goes through or fails, and for PostgreSQL the instance heartbeat every 5 s.
/// `/healthz` and `/metrics` read it; an outage is logged once when it starts and once when it
/// ends, not per failed statement.
///
/// While the store is gone nothing that must be written is dropped: feedback changes and resend
/// outcomes wait in memory (bounded) and are written when it answers again. ``writesWaiting``
/// counts them.
package final class StoreHealth: Sendable {
    /// Since when the store has failed, and how it failed last.
    package struct Outage: Sendable {
        package var since: ContinuousClock.Instant
        package var lastError: String
    }

    private let outage = Mutex<Outage?>(nil)
    private let feedbackChangesWaiting = Atomic<Int>(0)
    private let outcomesWaiting = Atomic<Int>(0)
    private let errors: CoreMetrics.Counter
    private let logger: Logger
    /// Values read that are no number where one belongs.
    let corruptValues: CorruptValues

    package init(logger: Logger, factory: any MetricsFactory = MetricsSystem.factory) {
        self.logger = logger
        self.errors = CoreMetrics.Counter(label: "apns_bridge_store_errors_total", factory: factory)
        self.corruptValues = CorruptValues(logger: logger, factory: factory)
    }

    /// Values read since the store opened that were no number where one belongs (text or a
    /// blob in an INTEGER column of a SQLite file someone edited): each counted as missing.
    package var corruptValuesRead: Int { self.corruptValues.count }

    /// `nil` while the store answers.
    package var currentOutage: Outage? {
        self.outage.withLock { $0 }
    }

    /// Feedback changes and resend records and outcomes waiting to be written again after a
    /// failed attempt.
    package var writesWaiting: Int {
        self.feedbackChangesWaiting.load(ordering: .relaxed) + self.outcomesWaiting.load(ordering: .relaxed)
    }

    /// A statement went through.
    func succeeded() {
        guard
            let ended = self.outage.withLock({ outage in
                defer { outage = nil }
                return outage
            })
        else { return }
        self.logger.notice(
            "the store answers again",
            metadata: [
                "outage_seconds": "\(ContinuousClock.now - ended.since)",
                "writes_waiting": "\(self.writesWaiting)",
            ]
        )
    }

    /// A statement failed: `operation` names what was being done.
    func failed(_ operation: String, _ error: any Error) {
        self.errors.increment()
        let description = String(describing: error)
        let started = self.outage.withLock { outage -> Bool in
            defer { outage = Outage(since: outage?.since ?? .now, lastError: "\(operation): \(description)") }
            return outage == nil
        }
        if started {
            self.logger.warning(
                "the store does not answer; what must be written waits and is retried",
                metadata: ["operation": "\(operation)", "error": "\(String(reflecting: error))"]
            )
        }
    }

    /// The feedback changes whose commit failed and that wait for the next attempt.
    func feedbackChangesWaiting(_ count: Int) {
        self.feedbackChangesWaiting.store(count, ordering: .relaxed)
    }

    /// `delta` more (or fewer) resend records or outcomes wait for their next attempt.
    func outcomesWaiting(_ delta: Int) {
        self.outcomesWaiting.add(delta, ordering: .relaxed)
    }

    /// Runs `body` until it succeeds: a failure is reported and retried after a pause that
    /// grows from 50 ms to 2 s, while `keepTrying` (asked after each failure) says so; then
    /// the last error is thrown. For what must not be lost or failed while the store is
    /// briefly gone (a PostgreSQL restart, a locked or full SQLite file). `isWrite`: counted in
    /// ``writesWaiting`` while it waits.
    func retrying<Result>(
        _ operation: String,
        isWrite: Bool = true,
        while keepTrying: () -> Bool,
        _ body: () async throws -> Result
    ) async throws -> Result {
        var failures = 0
        defer {
            if failures > 0 && isWrite { self.outcomesWaiting(-1) }
        }
        while true {
            do {
                let result = try await body()
                self.succeeded()
                return result
            } catch {
                self.failed(operation, error)
                if failures == 0 && isWrite { self.outcomesWaiting(1) }
                failures += 1
                guard keepTrying(), !Task.isCancelled else { throw error }
                try? await Task.sleep(for: Self.pause(afterFailures: failures))
            }
        }
    }

    /// 50 ms, 100 ms, 200 ms … at most 2 s.
    static func pause(afterFailures failures: Int) -> Duration {
        .milliseconds(min(2_000, 50 << min(failures - 1, 6)))
    }
}

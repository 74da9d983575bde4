import CoreMetrics
import Logging
import Synchronization

/// Values in the store that are not what their column holds (docs/operations.md#store-values):
/// text that is no number, or a blob, in an INTEGER column of a SQLite file someone edited. Each
/// is read as missing and counted (`apns_bridge_store_corrupt_values_total`); the first is logged,
/// naming its column, and the rest only counted, so a corrupt table cannot flood the log.
final class CorruptValues: Sendable {
    private let found = Atomic<Int>(0)
    private let counter: CoreMetrics.Counter
    private let logger: Logger

    init(logger: Logger, factory: any MetricsFactory = MetricsSystem.factory) {
        self.logger = logger
        self.counter = CoreMetrics.Counter(label: "apns_bridge_store_corrupt_values_total", factory: factory)
    }

    /// How many were read since the store was opened.
    var count: Int { self.found.load(ordering: .relaxed) }

    func read(column: String, type: String) {
        self.counter.increment()
        guard self.found.wrappingAdd(1, ordering: .relaxed).oldValue == 0 else { return }
        self.logger.warning(
            "a value in the store is not a number: it is read as missing (the next ones are counted in apns_bridge_store_corrupt_values_total, not logged)",
            metadata: ["column": "\(column)", "stored_type": "\(type)"]
        )
    }
}

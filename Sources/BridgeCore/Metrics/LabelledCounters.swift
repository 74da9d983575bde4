import CoreMetrics
import Synchronization

/// Counters of one name with a fixed set of label names, made on first use of each label set.
public final class LabelledCounters: Sendable {
    private let label: String
    private let labelNames: [String]
    private let counters = Mutex<[[String]: Counter]>([:])
    private let factory: any MetricsFactory

    public init(label: String, labelNames: [String], factory: any MetricsFactory = MetricsSystem.factory) {
        self.label = label
        self.labelNames = labelNames
        self.factory = factory
    }

    public func increment(_ labelValues: [String], by amount: Int = 1) {
        self.counter(labelValues).increment(by: Int64(amount))
    }

    /// Makes the series of these label values (at zero), so that it exists before its first event.
    public func prepare(_ labelValues: [String]) {
        _ = self.counter(labelValues)
    }

    private func counter(_ labelValues: [String]) -> Counter {
        precondition(
            labelValues.count == self.labelNames.count,
            "\(self.label): label values do not match its label names"
        )
        return self.counters.withLock { counters in
            if let counter = counters[labelValues] { return counter }
            let counter = Counter(
                label: self.label,
                dimensions: Array(zip(self.labelNames, labelValues)),
                factory: self.factory
            )
            counters[labelValues] = counter
            return counter
        }
    }
}

import CoreMetrics
import Synchronization

/// The client's metrics, made from the metrics factory the client is given (swift-metrics'
/// global one unless the caller passes another, as tests do).
///
/// The names keep the `apns_bridge_` prefix of the product the client was written for, so that
/// dashboards and alert rules stay valid.
public final class APNsClientMetrics: Sendable {
    /// One per attempt that got an answer, from the write to the answer.
    let requestDuration: Timer
    let retries: Counter
    let goAways: Counter
    /// Streams reset because the upstream did not answer before the request's deadline.
    let timeouts: Counter
    /// Made once: nearly every answer is a 200, and it should not cost a lookup.
    private let okResponses: Counter
    private let otherResponses: Mutex<[Int: Counter]>
    private let factory: any MetricsFactory

    public static let durationLabel = "apns_bridge_upstream_request_duration_seconds"
    public static let retriesLabel = "apns_bridge_upstream_retries_total"
    public static let goAwaysLabel = "apns_bridge_upstream_goaways_total"
    public static let timeoutsLabel = "apns_bridge_upstream_request_timeouts_total"
    public static let responsesLabel = "apns_bridge_upstream_responses_total"
    public static let tokensMintedLabel = "apns_bridge_provider_tokens_minted_total"

    public init(factory: any MetricsFactory = MetricsSystem.factory) {
        self.factory = factory
        self.requestDuration = Timer(label: Self.durationLabel, dimensions: [], preferredDisplayUnit: .seconds, factory: factory)
        self.retries = Counter(label: Self.retriesLabel, factory: factory)
        self.goAways = Counter(label: Self.goAwaysLabel, factory: factory)
        self.timeouts = Counter(label: Self.timeoutsLabel, factory: factory)
        self.okResponses = Counter(label: Self.responsesLabel, dimensions: [("status", "200")], factory: factory)
        // The statuses APNs documents exist from the start (at zero), so that an alert on one
        // of them has a value to evaluate before the first such answer.
        var documented: [Int: Counter] = [:]
        for status in Self.documentedStatuses {
            documented[status] = Counter(label: Self.responsesLabel, dimensions: [("status", "\(status)")], factory: factory)
        }
        self.otherResponses = Mutex(documented)
    }

    /// The HTTP statuses of Apple's provider API besides 200.
    static let documentedStatuses = [400, 403, 404, 405, 410, 413, 429, 500, 503]

    func attemptAnswered(status: Int, after nanoseconds: Int64) {
        self.requestDuration.recordNanoseconds(nanoseconds)
        if status == 200 {
            self.okResponses.increment()
            return
        }
        // HTTP statuses are three digits: the label set stays small whatever the server sends.
        let label = (100...599).contains(status) ? status : 0
        let counter = self.otherResponses.withLock { counters in
            if let counter = counters[label] { return counter }
            let counter = Counter(label: Self.responsesLabel, dimensions: [("status", "\(label)")], factory: self.factory)
            counters[label] = counter
            return counter
        }
        counter.increment()
    }

    func retried() { self.retries.increment() }
    func goAwayReceived() { self.goAways.increment() }
    func streamsTimedOut(_ count: Int) { self.timeouts.increment(by: Int64(count)) }
}

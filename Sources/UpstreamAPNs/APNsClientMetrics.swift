import CoreMetrics
import Synchronization

/// The client's metrics, made from the metrics factory the client is given (swift-metrics'
/// global one unless the caller passes another, as tests do).
///
/// Their names start with the client's ``APNsClient/Configuration/metricsPrefix``: `apns_bridge_`
/// by default, the product the client was written for, so that its dashboards and alert rules
/// stay valid; another sender names its own.
public final class APNsClientMetrics: Sendable {
    /// One per attempt that got an answer, from the write to the answer.
    let requestDuration: Timer
    let retries: Counter
    let goAways: Counter
    /// Connections set up: the pool's own, their replacements and the ones opened while every
    /// stream was taken.
    let connectionsOpened: Counter
    /// Streams reset because the upstream did not answer before the request's deadline.
    let timeouts: Counter
    /// Made once: nearly every answer is a 200, and it should not cost a lookup.
    private let okResponses: Counter
    private let otherResponses: Mutex<[Int: Counter]>
    private let factory: any MetricsFactory
    private let responsesLabel: String

    /// The prefix of every name unless the configuration gives another.
    public static let defaultPrefix = "apns_bridge_"
    public static let durationName = "upstream_request_duration_seconds"
    public static let retriesName = "upstream_retries_total"
    public static let goAwaysName = "upstream_goaways_total"
    public static let connectionsOpenedName = "upstream_connections_opened_total"
    public static let timeoutsName = "upstream_request_timeouts_total"
    public static let responsesName = "upstream_responses_total"
    public static let tokensMintedName = "provider_tokens_minted_total"

    public init(prefix: String = APNsClientMetrics.defaultPrefix, factory: any MetricsFactory = MetricsSystem.factory) {
        self.factory = factory
        self.responsesLabel = prefix + Self.responsesName
        self.requestDuration = Timer(
            label: prefix + Self.durationName,
            dimensions: [],
            preferredDisplayUnit: .seconds,
            factory: factory
        )
        self.retries = Counter(label: prefix + Self.retriesName, factory: factory)
        self.goAways = Counter(label: prefix + Self.goAwaysName, factory: factory)
        self.connectionsOpened = Counter(label: prefix + Self.connectionsOpenedName, factory: factory)
        self.timeouts = Counter(label: prefix + Self.timeoutsName, factory: factory)
        self.okResponses = Counter(label: self.responsesLabel, dimensions: [("status", "200")], factory: factory)
        // The statuses APNs documents exist from the start (at zero), so that an alert on one
        // of them has a value to evaluate before the first such answer.
        var documented: [Int: Counter] = [:]
        for status in Self.documentedStatuses {
            documented[status] = Counter(
                label: self.responsesLabel,
                dimensions: [("status", "\(status)")],
                factory: factory
            )
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
            let counter = Counter(
                label: self.responsesLabel,
                dimensions: [("status", "\(label)")],
                factory: self.factory
            )
            counters[label] = counter
            return counter
        }
        counter.increment()
    }

    func retried() { self.retries.increment() }
    func goAwayReceived() { self.goAways.increment() }
    func streamsTimedOut(_ count: Int) { self.timeouts.increment(by: Int64(count)) }
}

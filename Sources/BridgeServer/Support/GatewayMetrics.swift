import BridgeCore
import CoreMetrics
import LegacyProtocol
import Synchronization

/// The legacy side's metrics, through swift-metrics (the `serve` command exports them in
/// Prometheus format; elsewhere they go nowhere). Names follow Prometheus conventions; every
/// name keeps one set of label names.
public final class GatewayMetrics: Sendable {
    /// One instance per process: swift-metrics hands out handlers by name, and creating them is
    /// not free, so they are made once.
    public static let shared = GatewayMetrics()

    let received = Counter(label: "apns_bridge_notifications_received_total")
    let inFlight = Meter(label: "apns_bridge_notifications_in_flight")
    let resendsAnsweredFromRecords = Counter(label: "apns_bridge_resends_deduplicated_total")
    /// Resends of notifications whose first send has no outcome any more (its process stopped or
    /// crashed with it in flight, or the bridge gave up on it): forwarded again (docs/protocol.md#resend-records).
    let resendsForwardedAgain = Counter(label: "apns_bridge_resends_forwarded_again_total")
    let gatewayConnections = Meter(label: "apns_bridge_legacy_connections", dimensions: [("listener", "gateway")])
    let feedbackConnections = Meter(label: "apns_bridge_legacy_connections", dimensions: [("listener", "feedback")])
    let refusedHandshakes = Counter(label: "apns_bridge_refused_client_certificates_total")
    let feedbackDelivered = Counter(label: "apns_bridge_feedback_tuples_delivered_total")
    let feedbackRecorded = Counter(label: "apns_bridge_feedback_entries_recorded_total")
    /// Failures decided after the provider's connection was gone: nobody could be told.
    let failuresAfterClose = Counter(label: "apns_bridge_failures_after_provider_close_total")
    /// Frames cut off by the end of a provider's input (docs/protocol.md#end-of-input: not forwarded).
    let partialFrames = Counter(label: "apns_bridge_partial_frames_dropped_total")
    private let errorResponses = LabelledCounters(label: "apns_bridge_error_responses_total", labelNames: ["status"])
    /// Connections closed at accept: `reason` is `connections` (the connection cap),
    /// `handshakes` (too many handshakes in progress) or `handshakes_per_address`.
    private let refusedConnections = LabelledCounters(
        label: "apns_bridge_refused_connections_total",
        labelNames: ["listener", "reason"]
    )
    /// Handshakes that failed because the client offers no TLS version the listener accepts
    /// (TLS 1.0 only without `tls.allowLegacyTLS`, TLS 1.3 only without `tls.allowTLS13`).
    private let refusedTLSVersions = LabelledCounters(
        label: "apns_bridge_refused_tls_versions_total",
        labelNames: ["listener"]
    )
    /// Connections from a configured load balancer closed for their PROXY protocol header:
    /// `reason` is `missing` (not a header), `malformed` or `timeout`.
    private let refusedProxyHeaders = LabelledCounters(
        label: "apns_bridge_refused_proxy_headers_total",
        labelNames: ["listener", "reason"]
    )

    /// Outcomes by tenant, one set per tenant name (made at handshake, not per notification).
    private let tenantOutcomes = Mutex<[String: TenantOutcomeCounters]>([:])

    private init() {}

    /// The outcome counters of a tenant: `apns_bridge_notifications_total{tenant, outcome}`.
    func outcomes(tenant: String) -> TenantOutcomeCounters {
        self.tenantOutcomes.withLock { counters in
            if let existing = counters[tenant] { return existing }
            let made = TenantOutcomeCounters(tenant: tenant)
            counters[tenant] = made
            return made
        }
    }

    /// Makes the labelled series a dashboard or alert rule names, at zero, so that they exist
    /// from the first scrape: the known tenants' outcomes, every error-response status, and
    /// every reason a listener refuses a connection.
    public func prepareSeries(tenants: [String]) {
        for tenant in tenants {
            _ = self.outcomes(tenant: tenant)
        }
        for status in ErrorResponseStatus.failures {
            self.errorResponses.prepare(["\(status.rawValue)"])
            for reason in ["local", "malformed"] {
                NotificationMetrics.failed.prepare(["\(status.rawValue)", reason])
            }
        }
        for listener in ["gateway", "feedback"] {
            self.refusedTLSVersions.prepare([listener])
            for reason in ["missing", "malformed", "timeout"] {
                self.refusedProxyHeaders.prepare([listener, reason])
            }
            for reason in ["connections", "handshakes", "handshakes_per_address"] {
                self.refusedConnections.prepare([listener, reason])
            }
        }
    }

    func notificationReceived() { self.received.increment() }
    func forwardStarted() { self.inFlight.increment() }
    func forwardFinished() { self.inFlight.decrement() }
    func resendAnsweredFromRecord() { self.resendsAnsweredFromRecords.increment() }
    func resendForwardedAgain() { self.resendsForwardedAgain.increment() }
    func handshakeRefused() { self.refusedHandshakes.increment() }
    func feedbackTuplesDelivered(_ count: Int) { self.feedbackDelivered.increment(by: Int64(count)) }
    func feedbackEntryRecorded() { self.feedbackRecorded.increment() }
    func failureAfterClose() { self.failuresAfterClose.increment() }
    func partialFrameDropped() { self.partialFrames.increment() }
    func connectionRefused(listener: String, reason: String) { self.refusedConnections.increment([listener, reason]) }
    func tlsVersionRefused(listener: String) { self.refusedTLSVersions.increment([listener]) }
    func proxyHeaderRefused(listener: String, reason: String) {
        self.refusedProxyHeaders.increment([listener, reason])
    }

    /// A notification refused here: `reason` is `local` (a validation rule) or `malformed` (an
    /// unreadable frame).
    func refused(_ status: ErrorResponseStatus, reason: String) {
        NotificationMetrics.failed.increment(["\(status.rawValue)", reason])
    }

    func errorResponseSent(_ status: ErrorResponseStatus) {
        self.errorResponses.increment(["\(status.rawValue)"])
    }
}

/// One tenant's notifications by outcome: `accepted` (200), `unregistered` (410), `rejected`
/// (an error-response status: upstream, local, or the bridge giving up after its retries),
/// `dropped` (given up after 429s).
struct TenantOutcomeCounters: Sendable {
    let accepted: Counter
    let unregistered: Counter
    let rejected: Counter
    let dropped: Counter

    init(tenant: String) {
        func counter(_ outcome: String) -> Counter {
            Counter(label: "apns_bridge_notifications_total", dimensions: [("tenant", tenant), ("outcome", outcome)])
        }
        self.accepted = counter("accepted")
        self.unregistered = counter("unregistered")
        self.rejected = counter("rejected")
        self.dropped = counter("dropped")
    }

    func count(_ outcome: NotificationOutcome) {
        switch outcome {
        case .accepted: self.accepted.increment()
        case .unregistered: self.unregistered.increment()
        case .rejected, .gaveUp: self.rejected.increment()
        case .dropped: self.dropped.increment()
        }
    }
}

import BridgeCore
import CoreMetrics
import LegacyProtocol
import Synchronization

/// The legacy side's metrics, through swift-metrics (the `serve` command exports them in
/// Prometheus format; elsewhere they go nowhere). Names follow Prometheus conventions; every
/// name keeps one set of label names.
///
/// Made once by whoever runs the listeners (`serve` makes one for both) and handed to them:
/// creating the handlers is not free, so a connection never makes its own. Tests give it a
/// factory of their own (swift-metrics' `MetricsTestKit`) and read the counters there.
package final class GatewayMetrics: Sendable {
    let received: Counter
    let inFlight: Meter
    let resendsAnsweredFromRecords: Counter
    /// Resends of notifications whose first send has no outcome any more (its process stopped or
    /// crashed with it in flight, or the bridge gave up on it): forwarded again (docs/protocol.md#resend-records).
    let resendsForwardedAgain: Counter
    let gatewayConnections: Meter
    let feedbackConnections: Meter
    let refusedHandshakes: Counter
    let feedbackDelivered: Counter
    let feedbackRecorded: Counter
    /// Failures decided after the provider's connection was gone: nobody could be told.
    let failuresAfterClose: Counter
    /// Frames cut off by the end of a provider's input (docs/protocol.md#end-of-input: not forwarded).
    let partialFrames: Counter
    let farewellsBeforeRecords: Counter
    private let errorResponses: LabelledCounters
    /// `apns_bridge_notifications_failed_total{status, reason}` for the failures the gateway
    /// decides: `reason` is `local` (a validation rule) or `malformed` (an unreadable frame).
    /// The upstream counts the failures APNs decides into a series of the same name, with APNs'
    /// reason (`APNsForwarder`).
    private let failed: LabelledCounters
    /// Connections closed at accept: `reason` is `connections` (the connection cap),
    /// `handshakes` (too many handshakes in progress) or `handshakes_per_address`.
    private let refusedConnections: LabelledCounters
    /// Handshakes that failed because the client offers no TLS version the listener accepts
    /// (TLS 1.0 only without `tls.allowLegacyTLS`, TLS 1.3 only without `tls.allowTLS13`).
    private let refusedTLSVersions: LabelledCounters
    /// Connections from a configured load balancer closed for their PROXY protocol header:
    /// `reason` is `missing` (not a header), `malformed` or `timeout`.
    private let refusedProxyHeaders: LabelledCounters
    private let factory: any MetricsFactory

    /// - Parameter factory: where the metrics go; swift-metrics' global factory unless given.
    package init(factory: any MetricsFactory = MetricsSystem.factory) {
        self.factory = factory
        self.received = Counter(label: "apns_bridge_notifications_received_total", factory: factory)
        self.inFlight = Meter(label: "apns_bridge_notifications_in_flight", factory: factory)
        self.resendsAnsweredFromRecords = Counter(label: "apns_bridge_resends_deduplicated_total", factory: factory)
        self.resendsForwardedAgain = Counter(label: "apns_bridge_resends_forwarded_again_total", factory: factory)
        self.gatewayConnections = Meter(
            label: "apns_bridge_legacy_connections",
            dimensions: [("listener", "gateway")],
            factory: factory
        )
        self.feedbackConnections = Meter(
            label: "apns_bridge_legacy_connections",
            dimensions: [("listener", "feedback")],
            factory: factory
        )
        self.refusedHandshakes = Counter(label: "apns_bridge_refused_client_certificates_total", factory: factory)
        self.feedbackDelivered = Counter(label: "apns_bridge_feedback_tuples_delivered_total", factory: factory)
        self.feedbackRecorded = Counter(label: "apns_bridge_feedback_entries_recorded_total", factory: factory)
        self.failuresAfterClose = Counter(label: "apns_bridge_failures_after_provider_close_total", factory: factory)
        self.partialFrames = Counter(label: "apns_bridge_partial_frames_dropped_total", factory: factory)
        self.farewellsBeforeRecords = Counter(
            label: "apns_bridge_shutdown_farewells_before_records_total",
            factory: factory
        )
        self.errorResponses = LabelledCounters(
            label: "apns_bridge_error_responses_total",
            labelNames: ["status"],
            factory: factory
        )
        self.failed = LabelledCounters(
            label: "apns_bridge_notifications_failed_total",
            labelNames: ["status", "reason"],
            factory: factory
        )
        self.refusedConnections = LabelledCounters(
            label: "apns_bridge_refused_connections_total",
            labelNames: ["listener", "reason"],
            factory: factory
        )
        self.refusedTLSVersions = LabelledCounters(
            label: "apns_bridge_refused_tls_versions_total",
            labelNames: ["listener"],
            factory: factory
        )
        self.refusedProxyHeaders = LabelledCounters(
            label: "apns_bridge_refused_proxy_headers_total",
            labelNames: ["listener", "reason"],
            factory: factory
        )
    }

    /// Outcomes by tenant, one set per tenant name (made at handshake, not per notification).
    private let tenantOutcomes = Mutex<[String: TenantOutcomeCounters]>([:])

    /// The outcome counters of a tenant: `apns_bridge_notifications_total{tenant, outcome}`.
    func outcomes(tenant: String) -> TenantOutcomeCounters {
        self.tenantOutcomes.withLock { counters in
            if let existing = counters[tenant] { return existing }
            let made = TenantOutcomeCounters(tenant: tenant, factory: self.factory)
            counters[tenant] = made
            return made
        }
    }

    /// Makes the labelled series a dashboard or alert rule names, at zero, so that they exist
    /// from the first scrape: the known tenants' outcomes, every error-response status, and
    /// every reason a listener refuses a connection.
    package func prepareSeries(tenants: [String]) {
        for tenant in tenants {
            _ = self.outcomes(tenant: tenant)
        }
        for status in ErrorResponseStatus.failures {
            self.errorResponses.prepare(["\(status.rawValue)"])
            for reason in ["local", "malformed"] {
                self.failed.prepare(["\(status.rawValue)", reason])
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
    func farewellBeforeRecords() { self.farewellsBeforeRecords.increment() }
    func connectionRefused(listener: String, reason: String) { self.refusedConnections.increment([listener, reason]) }
    func tlsVersionRefused(listener: String) { self.refusedTLSVersions.increment([listener]) }
    func proxyHeaderRefused(listener: String, reason: String) {
        self.refusedProxyHeaders.increment([listener, reason])
    }

    /// A notification refused here: `reason` is `local` (a validation rule) or `malformed` (an
    /// unreadable frame).
    func refused(_ status: ErrorResponseStatus, reason: String) {
        self.failed.increment(["\(status.rawValue)", reason])
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

    init(tenant: String, factory: any MetricsFactory) {
        func counter(_ outcome: String) -> Counter {
            Counter(
                label: "apns_bridge_notifications_total",
                dimensions: [("tenant", tenant), ("outcome", outcome)],
                factory: factory
            )
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

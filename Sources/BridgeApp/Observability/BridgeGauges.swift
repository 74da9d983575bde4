import BridgeCore
import CoreMetrics
import Prometheus

/// Gauges the runtime sets from what it reads now and then (the store, the pools), rather
/// than counting as things happen. `serve` makes one and hands it to what sets them.
final class BridgeGauges: Sendable {
    private let factory: any MetricsFactory
    private let feedbackPending: CoreMetrics.Gauge
    private let storeReachable: CoreMetrics.Gauge
    private let storeWritesWaiting: CoreMetrics.Gauge
    private let production: CoreMetrics.Gauge
    private let sandbox: CoreMetrics.Gauge

    init(factory: any MetricsFactory = MetricsSystem.factory) {
        self.factory = factory
        self.feedbackPending = CoreMetrics.Gauge(label: "apns_bridge_feedback_pending", factory: factory)
        self.storeReachable = CoreMetrics.Gauge(label: "apns_bridge_store_reachable", factory: factory)
        self.storeWritesWaiting = CoreMetrics.Gauge(label: "apns_bridge_store_writes_waiting", factory: factory)
        self.production = CoreMetrics.Gauge(
            label: "apns_bridge_upstream_connections",
            dimensions: [("environment", "production")],
            factory: factory
        )
        self.sandbox = CoreMetrics.Gauge(
            label: "apns_bridge_upstream_connections",
            dimensions: [("environment", "sandbox")],
            factory: factory
        )
    }

    func feedbackPending(_ count: Int) {
        self.feedbackPending.record(count)
    }

    /// docs/operations.md#store-outage: 0 while the store does not answer; what waits for it.
    func store(reachable: Bool, writesWaiting: Int) {
        self.storeReachable.record(reachable ? 1 : 0)
        self.storeWritesWaiting.record(writesWaiting)
    }

    /// `apns_bridge_build_info{version, engine} 1`: which build runs, on which HTTP/2 engine.
    func buildInfo(version: String, engine: String) {
        CoreMetrics.Gauge(
            label: "apns_bridge_build_info",
            dimensions: [("version", version), ("engine", engine)],
            factory: self.factory
        )
        .record(1)
    }

    func upstreamConnections(_ environment: APNsEnvironment, _ count: Int) {
        switch environment {
        case .production: self.production.record(count)
        case .sandbox: self.sandbox.record(count)
        }
    }
}

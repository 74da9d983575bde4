import BridgeCore
import CoreMetrics
import Prometheus
import UpstreamAPNs

/// Gauges the runtime sets from what it reads now and then (the store, the pools), rather
/// than counting as things happen. `serve` makes one and hands it to what sets them.
final class BridgeGauges: Sendable {
    private let factory: any MetricsFactory
    private let feedbackPending: CoreMetrics.Gauge
    private let storeReachable: CoreMetrics.Gauge
    private let storeWritesWaiting: CoreMetrics.Gauge
    /// `apns_bridge_upstream_connections{environment, state}`, by environment, then by state.
    private let connections: [APNsEnvironment: [ConnectionState: CoreMetrics.Gauge]]

    /// The `state` label of the upstream connections gauge (docs/operations.md#observing).
    enum ConnectionState: String, CaseIterable {
        case usable, draining, connecting
    }

    init(factory: any MetricsFactory = MetricsSystem.factory) {
        self.factory = factory
        self.feedbackPending = CoreMetrics.Gauge(label: "apns_bridge_feedback_pending", factory: factory)
        self.storeReachable = CoreMetrics.Gauge(label: "apns_bridge_store_reachable", factory: factory)
        self.storeWritesWaiting = CoreMetrics.Gauge(label: "apns_bridge_store_writes_waiting", factory: factory)
        var connections: [APNsEnvironment: [ConnectionState: CoreMetrics.Gauge]] = [:]
        for environment in APNsEnvironment.allCases {
            for state in ConnectionState.allCases {
                connections[environment, default: [:]][state] = CoreMetrics.Gauge(
                    label: "apns_bridge_upstream_connections",
                    dimensions: [("environment", environment.rawValue), ("state", state.rawValue)],
                    factory: factory
                )
            }
        }
        self.connections = connections
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

    func upstreamConnections(_ environment: APNsEnvironment, _ counts: APNsClient.ConnectionCounts) {
        guard let gauges = self.connections[environment] else { return }
        gauges[.usable]?.record(counts.usable)
        gauges[.draining]?.record(counts.draining)
        gauges[.connecting]?.record(counts.connecting)
    }
}

import BridgeCore
import CoreMetrics
import Prometheus

/// Bootstraps swift-metrics with a Prometheus registry, once per process.
package enum BridgeMetrics {
    /// Upstream latency buckets: from half a millisecond to the retry budget's order.
    static let latencyBuckets: [Duration] = [
        .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5),
        .seconds(5), .seconds(10),
    ]

    /// Makes every swift-metrics handler of the process report to the returned registry, which
    /// the admin port's `/metrics` exports (``BridgeRuntime/serve(_:source:metrics:logLevel:logger:ready:)``); call it
    /// once, before anything creates a metric.
    package static func bootstrapPrometheus() -> PrometheusCollectorRegistry {
        let registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = Self.latencyBuckets
        MetricsSystem.bootstrap(factory)
        return registry
    }
}

import Benchmark

/// The configuration every micro-benchmark of apns-bridge uses.
///
/// Allocation counts are checked against Thresholds/ (p90 of one measured iteration,
/// unscaled). About 16 of them per iteration are the harness's own, whatever the work, so a few
/// of slack; one allocation more per frame is +1,000 and fails. Times are reported, not
/// checked: on a shared 2-core machine they move by ±40 % between runs.
public func apnsBridgeBenchmarkConfiguration(scaling: BenchmarkScalingFactor = .kilo) -> Benchmark.Configuration {
    .init(
        metrics: [.throughput, .wallClock, .cpuTotal, .mallocCountTotal],
        timeUnits: .nanoseconds,
        warmupIterations: 10,
        scalingFactor: scaling,
        maxDuration: .seconds(2),
        maxIterations: 100_000,
        thresholds: [.mallocCountTotal: .init(absolute: [.p90: 8])]
    )
}

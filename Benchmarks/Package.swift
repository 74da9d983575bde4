// swift-tools-version: 6.1
import PackageDescription

// The benchmarks of apns-bridge, in a package of their own so that the main package's build
// stays lean (package-benchmark and its malloc interposer are only built here).
//
//   swift package --disable-sandbox benchmark                    micro-benchmarks
//   swift package --disable-sandbox benchmark thresholds check   allocations against Thresholds/
//   scripts/update-thresholds.sh                                 re-record Thresholds/
//   swift run -c release apns-bridge-load --help                 the end-to-end load generator
//   scripts/run-e2e.sh                                           every end-to-end run, the plot
//
// See docs/performance.md for the method and the figures.
let package = Package(
    name: "apns-bridge-benchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "apns-bridge", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark.git", exact: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
    ],
    targets: [
        // The configuration the micro-benchmarks share (metrics, allocation thresholds).
        .target(
            name: "BenchmarkSupport",
            dependencies: [.product(name: "Benchmark", package: "benchmark")],
            path: "Sources/BenchmarkSupport"
        ),
        // Decoding legacy frames (commands 0, 1, 2) and encoding error-responses and feedback.
        .executableTarget(
            name: "LegacyCodec",
            dependencies: [
                "BenchmarkSupport",
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "LegacyProtocol", package: "apns-bridge"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Benchmarks/LegacyCodec",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        // One upstream request: path, apns-id, header block; provider-token reuse; reasons.
        .executableTarget(
            name: "UpstreamRequest",
            dependencies: [
                "BenchmarkSupport",
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "LegacyProtocol", package: "apns-bridge"),
                .product(name: "BridgeCore", package: "apns-bridge"),
                .product(name: "UpstreamAPNs", package: "apns-bridge"),
                .product(name: "BridgeUpstream", package: "apns-bridge"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/UpstreamRequest",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        // The end-to-end load generator: legacy TLS providers → apns-bridge serve → upstream.
        .executableTarget(
            name: "apns-bridge-load",
            dependencies: [
                .product(name: "LegacyProtocol", package: "apns-bridge"),
                .product(name: "BridgeCore", package: "apns-bridge"),
                .product(name: "UpstreamAPNs", package: "apns-bridge"),
                .product(name: "BridgeUpstream", package: "apns-bridge"),
                .product(name: "MockAPNs", package: "apns-bridge"),
                .product(name: "BridgeTestSupport", package: "apns-bridge"),
                .product(name: "LegacyClient", package: "apns-bridge"),
                .product(name: "DevelopmentPKI", package: "apns-bridge"),
                .product(name: "BridgeStores", package: "apns-bridge"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/apns-bridge-load"
        ),
    ]
)

// swift-tools-version: 6.1
import PackageDescription

// The benchmarks of apns-bridge, in a package of their own so that the main package's build
// stays lean (package-benchmark and its malloc interposer are only built here).
//
//   swift package --disable-sandbox benchmark                    micro-benchmarks
//   swift package --disable-sandbox benchmark thresholds check   allocations against Thresholds/
//   scripts/update-thresholds.sh                                 re-record Thresholds/
//   scripts/run-e2e.sh                                           every end-to-end run, the plot
//
// The end-to-end load generator's source is here too (Sources/apns-bridge-load), but the main
// package builds it, with the product and the tests: `swift build -c release --product
// apns-bridge-load` at the root, then `.build/release/apns-bridge-load --help`.
//
// See docs/performance.md for the method and the figures.
let package = Package(
    name: "apns-bridge-benchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(name: "apns-bridge", path: ".."),
        .package(url: "https://github.com/ordo-one/benchmark.git", exact: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
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
        // One upstream request: path, apns-id, header block; authentication-token reuse; reasons.
        .executableTarget(
            name: "UpstreamRequest",
            dependencies: [
                "BenchmarkSupport",
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "LegacyProtocol", package: "apns-bridge"),
                .product(name: "BridgeCore", package: "apns-bridge"),
                .product(name: "UpstreamAPNs", package: "apns-bridge"),
                .product(name: "BridgeForwarding", package: "apns-bridge"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/UpstreamRequest",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ]
)

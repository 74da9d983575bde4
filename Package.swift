// swift-tools-version: 6.2
import PackageDescription

/// CI builds the project's own targets with every warning as an error (`.ci/run` sets
/// APNS_BRIDGE_WARNINGS_AS_ERRORS=1); a local build only warns. Dependencies are not affected.
let warningsAsErrors: [SwiftSetting] =
    Context.environment["APNS_BRIDGE_WARNINGS_AS_ERRORS"] == "1" ? [.treatAllWarnings(as: .error)] : []

let swiftSettings: [SwiftSetting] =
    [
        .enableUpcomingFeature("ExistentialAny"),
        .enableUpcomingFeature("MemberImportVisibility"),
    ] + warningsAsErrors

let package = Package(
    name: "apns-bridge",
    platforms: [.macOS(.v14)],
    products: [
        // The one library for outside use: the APNs HTTP/2 client, with its DocC catalog.
        .library(name: "UpstreamAPNs", targets: ["UpstreamAPNs"]),
        // Public only for the benchmarks package (Benchmarks/, a package of its own so that
        // package-benchmark stays out of this build): its micro-benchmarks time the legacy
        // codec, the session machine and the upstream request. Every other module is
        // `package`: the binary, its tests and the load generator are all in this package.
        .library(name: "LegacyProtocol", targets: ["LegacyProtocol"]),
        .library(name: "BridgeCore", targets: ["BridgeCore"]),
        .library(name: "BridgeForwarding", targets: ["BridgeForwarding"]),
        .executable(name: "apns-bridge", targets: ["apns-bridge"]),
        .executable(name: "LegacyProtocolFuzzer", targets: ["LegacyProtocolFuzzer"]),
        .executable(name: "UpstreamEngineFuzzer", targets: ["UpstreamEngineFuzzer"]),
        .executable(name: "apns-bridge-load", targets: ["apns-bridge-load"]),
    ],
    traits: [
        // Upstream HTTP/2 on libnghttp2 (Debian libnghttp2-dev): `swift build --traits
        // NGHTTP2Engine`. Off by default, so the README's commands need nothing beyond Swift.
        .trait(name: "NGHTTP2Engine", description: "Upstream HTTP/2 connections on libnghttp2 (needs libnghttp2-dev)"),
        .default(enabledTraits: []),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/vapor/sqlite-nio.git", from: "1.13.2"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(
            url: "https://github.com/apple/swift-configuration.git",
            from: "1.4.0",
            traits: ["YAML", "Reloading"]
        ),
        // Already in the graph through swift-configuration's YAML trait; read directly to list
        // the keys a configuration file sets (unknown keys are refused).
        .package(url: "https://github.com/jpsim/Yams.git", "5.4.0"..<"7.0.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-system.git", from: "1.8.1"),
        // `swift package generate-documentation --target UpstreamAPNs`: the client's DocC
        // catalog, built in CI with warnings as errors. A plugin only: nothing of it is linked.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin.git", from: "1.5.0"),
        // The load generator's latency percentiles.
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
    ],
    targets: [
        // Wire formats of the legacy binary interface. NIOCore only: no sockets, no TLS.
        .target(
            name: "LegacyProtocol",
            dependencies: [.product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        // The PROXY protocol header a load balancer writes before TLS (versions 1 and 2), read
        // by BridgeServer's listeners. NIOCore only, like LegacyProtocol, so the legacy fuzzer
        // parses it without the listeners' dependencies.
        .target(
            name: "ProxyProtocol",
            dependencies: [.product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        // Sans-I/O provider session and the seams to the upstream and the stores.
        .target(
            name: "BridgeCore",
            dependencies: [
                "LegacyProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        // The I/O edge: TLS listeners, channel handlers, in-memory stores.
        .target(
            name: "BridgeServer",
            dependencies: [
                "LegacyProtocol",
                "ProxyProtocol",
                "BridgeCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        // An HTTP/2 client of Apple's provider API that stands on its own: connection pool,
        // authentication tokens, retries. Knows nothing of the legacy interface or the bridge.
        .target(
            name: "UpstreamAPNs",
            dependencies: [
                .target(name: "CNghttp2", condition: .when(traits: ["NGHTTP2Engine"])),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        // Fills BridgeCore's forwarding seam: a legacy notification becomes an APNs request,
        // and the client's final result a legacy outcome (docs/upstream.md#requests, #outcomes).
        .target(
            name: "BridgeForwarding",
            dependencies: [
                "LegacyProtocol",
                "BridgeCore",
                "UpstreamAPNs",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        // The durable store: feedback entries and resend records in SQLite (embedded) or
        // PostgreSQL (shared by several instances).
        .target(
            name: "BridgeStores",
            dependencies: [
                "BridgeCore",
                "LegacyProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "SQLiteNIO", package: "sqlite-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // A TLS HTTP/2 server that validates and answers like APNs, with scripted faults.
        // Independent of the client it tests: it shares no code with UpstreamAPNs or BridgeCore.
        .target(
            name: "MockAPNs",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // Shared by tests, the fuzzer's replay and (later) the demo: generated certificates,
        // frame builders, a legacy TLS client and a scripted upstream.
        // The legacy interface's client side: what `apns-bridge send` and `feedback` ship.
        .target(
            name: "LegacyClient",
            dependencies: [
                "LegacyProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        // A throwaway CA made in-process: the demo's and `mock-apns`'s certificates, the tests'.
        .target(
            name: "DevelopmentPKI",
            dependencies: [
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "BridgeTestSupport",
            dependencies: [
                "LegacyClient",
                "DevelopmentPKI",
                "LegacyProtocol",
                "BridgeCore",
                "BridgeServer",
                "UpstreamAPNs",
                "BridgeForwarding",
                "MockAPNs",
                "BridgeStores",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: swiftSettings
        ),
        // libnghttp2 from the system, for the NGHTTP2Engine trait only (pkg-config is not asked
        // without it).
        .systemLibrary(name: "CNghttp2", pkgConfig: "libnghttp2", providers: [.apt(["libnghttp2-dev"])]),
        // glibc's allocator statistics and malloc_trim, which the Glibc module does not export
        // (no library beyond the C library itself).
        .target(name: "CMallocStatistics"),
        // The assembled product: configuration (file, environment, flags), tenants and
        // credentials, the services under one ServiceGroup, the admin port with metrics.
        .target(
            name: "BridgeApp",
            dependencies: [
                "CMallocStatistics",
                "LegacyProtocol",
                "BridgeCore",
                "BridgeServer",
                "BridgeStores",
                "UpstreamAPNs",
                "BridgeForwarding",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: swiftSettings
        ),
        // The command-line tool: serve, demo, mock-apns, send, feedback, check-config.
        .executableTarget(
            name: "apns-bridge",
            dependencies: [
                "BridgeApp",
                "LegacyProtocol",
                "BridgeCore",
                "BridgeServer",
                "BridgeStores",
                "LegacyClient",
                "DevelopmentPKI",
                "UpstreamAPNs",
                "BridgeForwarding",
                "MockAPNs",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        // One fuzz input through the decoder and the session: used by the fuzzer and by the
        // tests that replay its corpus and crashers.
        .target(
            name: "LegacyStreamFuzzing",
            dependencies: [
                "LegacyProtocol",
                "ProxyProtocol",
                "BridgeCore",
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // libFuzzer entry point (see docs/fuzzing.md).
        .executableTarget(
            name: "LegacyProtocolFuzzer",
            dependencies: ["LegacyStreamFuzzing"],
            swiftSettings: swiftSettings
        ),
        // The libnghttp2 engine's handler on an EmbeddedChannel with the server played as bytes:
        // for its tests and its fuzzer (empty without the NGHTTP2Engine trait).
        .target(
            name: "UpstreamEngineFuzzing",
            dependencies: [
                "UpstreamAPNs",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // libFuzzer entry point over the libnghttp2 engine (see docs/fuzzing.md).
        .executableTarget(
            name: "UpstreamEngineFuzzer",
            dependencies: ["UpstreamAPNs", "UpstreamEngineFuzzing"],
            swiftSettings: swiftSettings
        ),
        // The end-to-end load generator: legacy TLS providers → `apns-bridge serve` → upstream
        // (docs/performance.md). Its source is with the benchmarks, in Benchmarks/; it is built
        // here, with the product, so that the build the tests make has it too.
        .executableTarget(
            name: "apns-bridge-load",
            dependencies: [
                "LegacyProtocol",
                "BridgeCore",
                "UpstreamAPNs",
                "BridgeForwarding",
                "MockAPNs",
                "BridgeTestSupport",
                "LegacyClient",
                "DevelopmentPKI",
                "BridgeStores",
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/Sources/apns-bridge-load",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "LegacyProtocolTests",
            dependencies: [
                "LegacyProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BridgeCoreTests",
            dependencies: [
                "LegacyProtocol",
                "BridgeCore",
                "BridgeTestSupport",
                "LegacyStreamFuzzing",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            resources: [.copy("FuzzCorpus")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "UpstreamAPNsTests",
            dependencies: [
                "UpstreamAPNs",
                "UpstreamEngineFuzzing",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            exclude: ["FuzzCorpus"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BridgeForwardingTests",
            dependencies: [
                "LegacyProtocol",
                "BridgeCore",
                "BridgeServer",
                "BridgeTestSupport",
                "DevelopmentPKI",
                "LegacyClient",
                "MockAPNs",
                "UpstreamAPNs",
                "BridgeForwarding",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "StoreTests",
            dependencies: [
                "LegacyProtocol",
                "BridgeCore",
                "BridgeStores",
                "BridgeTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "SQLiteNIO", package: "sqlite-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BridgeServerTests",
            dependencies: [
                "LegacyProtocol",
                "ProxyProtocol",
                "BridgeCore",
                "BridgeServer",
                "BridgeStores",
                "BridgeTestSupport",
                "DevelopmentPKI",
                "LegacyClient",
                "MockAPNs",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BridgeAppTests",
            dependencies: [
                "LegacyProtocol",
                "BridgeCore",
                "BridgeServer",
                "BridgeStores",
                "BridgeTestSupport",
                "BridgeForwarding",
                "BridgeApp",
                "DevelopmentPKI",
                "LegacyClient",
                "MockAPNs",
                "UpstreamAPNs",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // `apns-bridge` itself, as a child process: start-up, reload, shutdown, the stores under
        // crashes, the deploy files, the real legacy clients' interop.
        .testTarget(
            name: "ProcessTests",
            dependencies: [
                "LegacyProtocol",
                "BridgeCore",
                "BridgeServer",
                "BridgeTestSupport",
                "LegacyClient",
                "DevelopmentPKI",
                "UpstreamAPNs",
                "BridgeForwarding",
                "MockAPNs",
                "BridgeStores",
                "BridgeApp",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "SQLiteNIO", package: "sqlite-nio"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)

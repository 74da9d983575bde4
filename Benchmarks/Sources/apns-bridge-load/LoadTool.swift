import ArgumentParser
import Foundation
import Histogram
import NIOCore
import NIOPosix
import Synchronization

@main
struct LoadTool: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns-bridge-load",
        abstract: "End-to-end load for apns-bridge: legacy TLS providers → apns-bridge serve → an HTTP/2 upstream.",
        discussion: """
            Each subcommand runs one measurement on loopback and prints one JSON line (the \
            result) on standard output; progress goes to standard error. \
            Benchmarks/scripts/run-e2e.sh runs the whole set and draws the plot \
            (docs/performance.md).
            """,
        subcommands: [
            BridgeRun.self, ClientRun.self, H2LoadRun.self, IdleRun.self, BackpressureRun.self, KillWindowRun.self,
            StoreOutageRun.self,
        ]
    )
}

/// Options every run that starts a bridge shares.
struct BridgeOptions: ParsableArguments {
    @Option(help: "The apns-bridge executable (default: $APNS_BRIDGE_BINARY, else ../.build/release/apns-bridge).")
    var bridge: String?

    @Option(help: "HTTP/2 connections the bridge opens to the upstream (upstream.connectionsPerPool).")
    var upstreamConnections = 2

    @Option(name: .customLong("set"), help: "More bridge settings, KEY=VALUE (repeatable).")
    var settings: [String] = []

    @Option(help: "The bridge's log level (its log is in the run's temporary folder).")
    var bridgeLogLevel = "warning"

    var executable: String {
        if let bridge { return bridge }
        if let fromEnvironment = ProcessInfo.processInfo.environment["APNS_BRIDGE_BINARY"] { return fromEnvironment }
        for candidate in ["../.build/release/apns-bridge", ".build/release/apns-bridge"]
        where FileManager.default.isExecutableFile(atPath: candidate) {
            return candidate
        }
        return "../.build/release/apns-bridge"
    }

    /// `apns-bridge serve` with these options, sending to the upstream on `upstreamPort`.
    func startBridge(workspace: Workspace, upstreamPort: Int, store: String? = nil) async throws -> BridgeChild {
        try await BridgeChild.start(
            executable: self.executable,
            workspace: workspace,
            upstreamPort: upstreamPort,
            upstreamConnections: self.upstreamConnections,
            extraSettings: self.settings,
            logLevel: self.bridgeLogLevel,
            store: store
        )
    }
}

func progress(_ message: String) {
    FileHandle.standardError.write(Data("apns-bridge-load: \(message)\n".utf8))
}

/// Prints the result as one JSON line (keys sorted).
func emit(_ fields: [String: any Sendable]) {
    var parts: [String] = []
    for key in fields.keys.sorted() {
        let value = fields[key]!
        switch value {
        case let text as String: parts.append("\"\(key)\":\"\(text)\"")
        case let number as Double:
            parts.append("\"\(key)\":\(number.isFinite ? String(format: "%.3f", number) : "null")")
        case let number as Int: parts.append("\"\(key)\":\(number)")
        case let flag as Bool: parts.append("\"\(key)\":\(flag)")
        case Optional<Double>.none: parts.append("\"\(key)\":null")
        default: parts.append("\"\(key)\":\"\(value)\"")
        }
    }
    print("{" + parts.joined(separator: ",") + "}")
}

// MARK: bridge

struct BridgeRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bridge",
        abstract: "C providers send N notifications through apns-bridge serve to the upstream."
    )

    @OptionGroup var bridgeOptions: BridgeOptions

    @Option(
        help:
            "The upstream: mock (MockAPNs in this process; latency, lost and duplicated counted per notification) or nghttpd."
    )
    var upstream: String = "mock"

    @Option(help: "Legacy provider connections.")
    var connections = 10

    @Option(help: "Notifications in all.")
    var notifications = 100_000

    @Option(help: "Payload bytes (JSON).")
    var payloadSize = 200

    @Option(help: "Notifications per second over all connections; 0: as fast as possible.")
    var rate: Double = 0

    @Option(help: "Seconds to wait for every notification to arrive.")
    var timeout = 300

    @Flag(
        help:
            "The mock answers 410 Unregistered for every token: each notification goes to the feedback list and, with the push log on, to its failures in the store."
    )
    var unregistered = false

    @Option(help: "A label copied into the result.")
    var label = ""

    func run() async throws {
        guard let kind = UpstreamKind(rawValue: self.upstream) else {
            throw ValidationError("--upstream is mock or nghttpd")
        }
        guard !self.unregistered || kind == .mock else { throw ValidationError("--unregistered needs --upstream mock") }
        guard self.notifications > 0, self.connections > 0, self.notifications <= 50_000_000 else {
            throw ValidationError("--notifications 1…50,000,000 and --connections ≥ 1")
        }
        _ = raiseOpenFileLimit()
        let workspace = try Workspace()
        defer { workspace.remove() }
        let tracker = ArrivalTracker(count: self.notifications)
        let upstream = try await RunningUpstream.start(
            kind,
            workspace: workspace,
            tracker: kind == .mock ? tracker : nil
        )
        if self.unregistered { upstream.unregisterEveryToken() }
        let bridge = try await self.bridgeOptions.startBridge(workspace: workspace, upstreamPort: upstream.port)
        defer { bridge.stop() }
        let load = LegacyLoad(
            plan: .init(
                connections: self.connections,
                notifications: self.notifications,
                payloadSize: self.payloadSize,
                rate: self.rate > 0 ? self.rate : nil,
                distinctTokens: kind == .nghttpd ? nghttpdDistinctTokens : nil
            ),
            tracker: tracker
        )
        progress("\(self.connections) connections to the bridge (\(kind.rawValue) upstream)…")
        try await load.connect(
            port: bridge.gatewayPort,
            workspace: workspace,
            group: MultiThreadedEventLoopGroup.singleton
        )
        let counted200Before =
            kind == .nghttpd
            ? try await bridge.metric("apns_bridge_upstream_responses_total", labels: "status=\"200\"") : 0
        let cpuBefore = bridge.stats.cpuSeconds
        progress("sending \(self.notifications) notifications\(self.rate > 0 ? " at \(Int(self.rate))/s" : "")…")
        let started = ArrivalTracker.now
        load.start()

        // Wait for the arrivals (mock: counted per notification; nghttpd: the bridge's 200s).
        let deadline = ContinuousClock.now + .seconds(self.timeout)
        var finished = started
        var delivered200 = 0
        while ContinuousClock.now < deadline {
            if kind == .mock {
                if tracker.arrivalsSoFar >= self.notifications {
                    finished = tracker.lastArrivalTime
                    break
                }
                try await Task.sleep(for: .milliseconds(10))
            } else {
                delivered200 = Int(
                    try await bridge.metric("apns_bridge_upstream_responses_total", labels: "status=\"200\"")
                        - counted200Before
                )
                if delivered200 >= self.notifications {
                    finished = ArrivalTracker.now
                    break
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            if load.errorResponses.load(ordering: .relaxed) > 0 || load.closedEarly.load(ordering: .relaxed) > 0 {
                progress("a connection got an error-response or closed early")
                break
            }
        }
        if finished == started { finished = ArrivalTracker.now }
        let cpu = bridge.stats.cpuSeconds - cpuBefore
        // Duplicates would come after the last first arrival: give them a moment.
        try await Task.sleep(for: .milliseconds(300))
        let peak = bridge.stats.peakResidentKilobytes
        let resident = bridge.stats.residentKilobytes
        // The pools' own connections, and any opened while every stream was taken.
        let upstreamConnectionsOpened = Int(
            (try? await bridge.metric("apns_bridge_upstream_connections_opened_total")) ?? -1
        )
        // The push log's failures copied to the store so far (its copy runs every 5 s).
        let pushLogStored = Int((try? await bridge.metric("apns_bridge_push_log_stored_total")) ?? -1)
        await load.closeAll()
        let seconds = Double(finished - started) / 1e9

        var fields: [String: any Sendable] = [
            "run": "bridge", "label": self.label, "upstream": kind.rawValue,
            "connections": self.connections, "upstream_connections": self.bridgeOptions.upstreamConnections,
            "notifications": self.notifications, "payload_bytes": self.payloadSize,
            "rate_target": self.rate, "seconds": seconds,
            "bridge_cpu_seconds": cpu, "bridge_cpu_us_per_notification": cpu * 1e6 / Double(self.notifications),
            "bridge_peak_rss_kb": peak, "bridge_rss_kb": resident,
            "error_responses": load.errorResponses.load(ordering: .relaxed),
            "connections_closed_early": load.closedEarly.load(ordering: .relaxed),
            "upstream_connections_opened": upstreamConnectionsOpened,
            "push_log_stored": pushLogStored,
        ]
        if kind == .mock {
            let summary = tracker.summary()
            fields["delivered"] = summary.delivered
            fields["lost"] = summary.lost
            fields["duplicated"] = summary.duplicated
            fields["unknown_arrivals"] = summary.unknown
            fields["throughput"] = Double(summary.delivered) / seconds
            fields["p50_us"] = Int(summary.latency.valueAtPercentile(50))
            fields["p99_us"] = Int(summary.latency.valueAtPercentile(99))
            fields["p999_us"] = Int(summary.latency.valueAtPercentile(99.9))
            fields["max_us"] = Int(summary.latency.max)
        } else {
            fields["delivered"] = delivered200
            fields["lost"] = self.notifications - delivered200
            fields["duplicated"] = "not observable"
            fields["throughput"] = Double(delivered200) / seconds
        }
        await upstream.stop()
        emit(fields)
    }
}

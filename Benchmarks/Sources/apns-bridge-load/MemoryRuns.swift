import ArgumentParser
import Foundation
import NIOCore
import NIOPosix

// MARK: idle connections

struct IdleRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "idle",
        abstract: "Opens K idle legacy TLS connections to the bridge and reports its memory per connection."
    )

    @OptionGroup var bridgeOptions: BridgeOptions

    @Option(help: "Idle connections to open.")
    var connections = 10_000

    @Option(help: "A label copied into the result.")
    var label = ""

    @Option(help: "Seconds to wait after the connections closed before the bridge's memory is read again.")
    var settleSeconds = 40

    func run() async throws {
        guard self.connections > 0, self.connections <= 30_000 else { throw ValidationError("--connections 1…30,000") }
        guard (0...600).contains(self.settleSeconds) else { throw ValidationError("--settle-seconds 0…600") }
        let limit = raiseOpenFileLimit()
        guard limit > self.connections + 200 else {
            throw LoadToolError("the open-file limit is \(limit): raise it (ulimit -n) above \(self.connections + 200)")
        }
        let workspace = try Workspace()
        defer { workspace.remove() }
        let upstream = try await RunningUpstream.start(.mock, workspace: workspace, tracker: nil)
        let bridge = try await self.bridgeOptions.startBridge(workspace: workspace, upstreamPort: upstream.port)
        defer { bridge.stop() }
        // One connection first, so one-time costs (TLS tables, the first session) are not
        // counted per connection.
        let warm = LegacyLoad(
            plan: .init(connections: 1, notifications: 0, payloadSize: 200, rate: nil, distinctTokens: nil),
            tracker: ArrivalTracker(count: 1)
        )
        try await warm.connect(
            port: bridge.gatewayPort,
            workspace: workspace,
            group: MultiThreadedEventLoopGroup.singleton
        )
        try await Task.sleep(for: .seconds(1))
        let before = bridge.stats.residentKilobytes
        progress("opening \(self.connections) idle connections (bridge RSS \(before) KB)…")
        let started = ContinuousClock.now
        let load = LegacyLoad(
            plan: .init(
                connections: self.connections,
                notifications: 0,
                payloadSize: 200,
                rate: nil,
                distinctTokens: nil
            ),
            tracker: ArrivalTracker(count: 1)
        )
        try await load.connect(
            port: bridge.gatewayPort,
            workspace: workspace,
            group: MultiThreadedEventLoopGroup.singleton
        )
        let connectSeconds =
            Double((ContinuousClock.now - started).components.attoseconds) / 1e18
            + Double((ContinuousClock.now - started).components.seconds)
        try await Task.sleep(for: .seconds(3))
        let open = Int(try await bridge.metric("apns_bridge_legacy_connections", labels: "listener=\"gateway\""))
        let after = bridge.stats.residentKilobytes
        let perConnection = Double(after - before) / Double(self.connections)
        progress("bridge RSS \(after) KB with \(open) connections open")
        // After the burst: the connections close (the warm one stays), and what the bridge gives
        // back is read once it has had time to (its memory trim runs every 30 s at most).
        await load.closeAll()
        let closeDeadline = ContinuousClock.now + .seconds(60)
        while try await bridge.metric("apns_bridge_legacy_connections", labels: "listener=\"gateway\"") > 1,
            ContinuousClock.now < closeDeadline
        {
            try await Task.sleep(for: .milliseconds(100))
        }
        progress("connections closed; waiting \(self.settleSeconds) s…")
        try await Task.sleep(for: .seconds(self.settleSeconds))
        let afterClose = bridge.stats.residentKilobytes
        // Where what is still resident lies (read by the bridge every 30 s; 0 in a bridge that
        // does not export them).
        let allocatorFree = (try? await bridge.metric("apns_bridge_allocator_free_bytes")) ?? 0
        let allocatorInUse = (try? await bridge.metric("apns_bridge_allocator_in_use_bytes")) ?? 0
        let trims = (try? await bridge.metric("apns_bridge_memory_trims_total")) ?? 0
        progress("bridge RSS \(afterClose) KB after the connections closed")
        await warm.closeAll()
        await upstream.stop()
        emit([
            "run": "idle", "label": self.label, "connections": self.connections,
            "open_at_bridge": open, "bridge_rss_before_kb": before, "bridge_rss_after_kb": after,
            "bridge_rss_after_close_kb": afterClose, "retained_after_close_kb": afterClose - before,
            "allocator_free_after_close_kb": Int(allocatorFree) / 1024,
            "allocator_in_use_after_close_kb": Int(allocatorInUse) / 1024,
            "memory_trims": Int(trims),
            "kb_per_connection": perConnection, "connect_seconds": connectSeconds,
        ])
    }
}

// MARK: backpressure

struct BackpressureRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backpressure",
        abstract:
            "Providers send as fast as they can while the upstream answers each request after 1 s; the bridge's memory is sampled."
    )

    @OptionGroup var bridgeOptions: BridgeOptions

    @Option(help: "Legacy provider connections.")
    var connections = 100

    @Option(help: "Seconds to keep sending.")
    var duration = 20

    @Option(help: "Upstream answer delay in milliseconds.")
    var delayMilliseconds = 1_000

    @Option(help: "A label copied into the result.")
    var label = ""

    func run() async throws {
        guard self.duration > 2, self.duration <= 600 else { throw ValidationError("--duration 3…600") }
        _ = raiseOpenFileLimit()
        let workspace = try Workspace()
        defer { workspace.remove() }
        // More notifications than can arrive in the time: the providers are never out of work.
        let total = 2_000_000
        let tracker = ArrivalTracker(count: total)
        let upstream = try await RunningUpstream.start(
            .mock,
            workspace: workspace,
            tracker: tracker,
            responseDelay: .milliseconds(Int64(self.delayMilliseconds))
        )
        let bridge = try await self.bridgeOptions.startBridge(workspace: workspace, upstreamPort: upstream.port)
        let load = LegacyLoad(
            plan: .init(
                connections: self.connections,
                notifications: total,
                payloadSize: 200,
                rate: nil,
                distinctTokens: nil
            ),
            tracker: tracker
        )
        try await load.connect(
            port: bridge.gatewayPort,
            workspace: workspace,
            group: MultiThreadedEventLoopGroup.singleton
        )
        let before = bridge.stats.residentKilobytes
        progress("sending for \(self.duration) s against an upstream that answers after \(self.delayMilliseconds) ms…")
        load.start()
        var samples: [(Double, Int)] = []
        let started = ContinuousClock.now
        for tick in 1...(self.duration * 2) {
            try await Task.sleep(until: started + .milliseconds(500 * tick))
            samples.append((Double(tick) / 2, bridge.stats.residentKilobytes))
        }
        let inFlight = Int(try await bridge.metric("apns_bridge_notifications_in_flight"))
        let arrived = tracker.arrivalsSoFar
        // The second half of the run: memory must stay flat while the backlog does not grow.
        let secondHalf = samples.suffix(samples.count / 2).map(\.1)
        let firstHalf = samples.prefix(samples.count / 2).map(\.1)
        bridge.kill()  // a graceful stop would wait for the slow upstream
        await load.closeAll()
        await upstream.stop()
        emit([
            "run": "backpressure", "label": self.label, "connections": self.connections,
            "seconds": self.duration, "upstream_delay_ms": self.delayMilliseconds,
            "arrived_upstream": arrived, "bridge_in_flight_at_end": inFlight,
            "bridge_rss_before_kb": before,
            "bridge_rss_first_half_max_kb": firstHalf.max() ?? 0,
            "bridge_rss_second_half_min_kb": secondHalf.min() ?? 0,
            "bridge_rss_second_half_max_kb": secondHalf.max() ?? 0,
            "bridge_rss_samples_kb": samples.map { "\($0.0)s=\($0.1)" }.joined(separator: " "),
        ])
    }
}

import BridgeCore
import BridgeForwarding
import BridgeTestSupport
import Logging
import MetricsTestKit
import NIOCore
import NIOPosix
import Testing
import UpstreamAPNs

/// An upstream whose every connection answers once, sends GOAWAY and holds a stream open: the
/// pool stays within its bound and backs off, on both engines (docs/upstream.md#connections).
@Suite("A pool facing GOAWAY after every answer: bounded, backing off")
struct PoolBoundTests {
    /// How long providers write; the backoff's schedule bounds the connections opened in it.
    static let traffic: Duration = .seconds(8)
    static let senders = 16

    @Test(
        "Connections opened stay within the backoff's schedule, open ones within maximumConnectionsPerPool; all close",
        arguments: APNsHTTP2Engine.available
    )
    func boundedUnderGoAwayAfterEachAnswer(engine: APNsHTTP2Engine) async throws {
        let server = try await HostileHTTP2Server.start(.goAwayAfterFirstAnswer)
        var configuration = APNsForwarder.Configuration()
        configuration.endpoints = [.sandbox: server.endpoint]
        configuration.broadcastEndpoints = [.sandbox: server.endpoint]
        configuration.client.engine = engine
        // The defaults' shape (two pools, each of one connection, growing to two), with a held
        // stream reset after 2 s rather than 10 s and a short budget, so that the test ends soon.
        configuration.client.connectionsPerPool = 2
        configuration.client.maximumConnectionsPerPool = 4
        configuration.client.requestTimeout = .seconds(2)
        configuration.client.retryBudget = .seconds(6)
        let upstream = try APNsForwarder(
            configuration: configuration,
            credentials: UpstreamHarness.throwawayTokenCredentials(),
            logger: Logger.forTests(),
            metricsFactory: TestMetrics()
        )
        let clock = ContinuousClock()
        let start = clock.now
        // One sender first, until a request is accepted: a loaded machine (the debug suite
        // starting all at once) has taken longer than the traffic's 8 s to set up a connection,
        // and "at least one accepted" must not depend on that. 60 s bounds a hang. The bound
        // below counts from here, with the backoff's own schedule.
        var warmUpAccepted = 0
        var warmUpSeed = Self.senders * 1_000_000
        while warmUpAccepted == 0, clock.now < start + .seconds(60) {
            let outcome = try await upstream.send(
                UpstreamHarness.notification(warmUpSeed),
                on: MultiThreadedEventLoopGroup.singleton.any()
            ).get()
            if outcome == .accepted { warmUpAccepted += 1 }
            warmUpSeed += 1
        }
        let end = clock.now + Self.traffic
        let accepted = try await withThrowingTaskGroup(of: Int.self) { group in
            for sender in 0..<Self.senders {
                group.addTask {
                    var accepted = 0
                    var seed = sender
                    while clock.now < end {
                        let outcome = try await upstream.send(
                            UpstreamHarness.notification(seed),
                            on: MultiThreadedEventLoopGroup.singleton.any()
                        ).get()
                        if outcome == .accepted { accepted += 1 }
                        seed += Self.senders
                    }
                    return accepted
                }
            }
            return try await group.reduce(warmUpAccepted, +)
        }
        // From the first request to the answer of the last (up to its 6 s budget after `end`).
        let window = clock.now - start
        let counts = upstream.connectionCounts(.sandbox)
        let opened = upstream.connectionsOpened(.sandbox)
        await upstream.shutdownAndWait()
        await server.connectionsClosed()
        await server.close()

        #expect(accepted >= 1, "each connection answers its first request")
        // Each of the two pools opens its first connection at once and its n-th replacement
        // after a backoff of at least 50 ms × 2^(n−1) (at least 15 s once the 30 s limit is
        // reached): in the 8 s of traffic and the 6 s budget of the last request, at most 9 per
        // pool, and as many for anything up to 25 s. Before the bound and the backoff: 211 in 40 s.
        let bound = 2 * Self.connectionsWithin(window)
        #expect(opened <= bound, "\(opened) connections opened, at most \(bound)")
        #expect(server.connectionsAccepted <= bound + 2, "the server accepted \(server.connectionsAccepted)")
        #expect(
            counts.usable + counts.draining + counts.connecting <= 4,
            "open, draining and connecting at the end of the traffic: \(counts)"
        )
        // A replacement may connect before the server has read the close of the connection it
        // replaces: one such overlap per pool at most.
        #expect(server.mostConnectionsOpen <= 4 + 2, "at most \(server.mostConnectionsOpen) open at once")
    }

    /// The most connections one pool can open within `window`: the first at once, the n-th
    /// replacement after at least half of 100 ms × 2^(n−1), capped at 30 s (the backoff's jitter
    /// picks a point in the upper half).
    static func connectionsWithin(_ window: Duration) -> Int {
        var opened = 1
        var elapsed = Duration.zero
        while true {
            let delay = min(Duration.milliseconds(50) * (1 << min(opened - 1, 20)), .seconds(15))
            guard elapsed + delay <= window else { return opened }
            elapsed += delay
            opened += 1
        }
    }
}

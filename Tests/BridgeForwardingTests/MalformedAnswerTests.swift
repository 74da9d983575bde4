import BridgeCore
import BridgeForwarding
import BridgeTestSupport
import LegacyProtocol
import Logging
import MetricsTestKit
import NIOCore
import NIOPosix
import Testing
import UpstreamAPNs

/// An upstream that answers outside Apple's API gets one reading on both HTTP/2 engines, and
/// its answers, one per notification, never become one alarm per notification (docs/upstream.md).
@Suite("A malformed upstream answer: the same status on both engines, no alarm per notification")
struct MalformedAnswerTests {
    static let count = 50

    @Test(
        "Each notification gets the behaviour's status; no critical line, at most one warning per 10 s",
        arguments: APNsHTTP2Engine.available,
        HostileHTTP2Server.Behaviour.malformedAnswers
    )
    func sameStatusNoFlood(engine: APNsHTTP2Engine, behaviour: HostileHTTP2Server.Behaviour) async throws {
        let expected: NotificationOutcome =
            switch behaviour {
            // The body's reason is read as it is, whatever the content-length said.
            case .misstatedContentLength: .rejected(.invalidToken)
            // The server's PROTOCOL_ERROR: status 255, not retried.
            case .resetWithProtocolError: .rejected(.unknown)
            // Not among malformedAnswers: PoolBoundTests holds the pool to its bound under it.
            case .goAwayAfterFirstAnswer: .accepted
            }
        let server = try await HostileHTTP2Server.start(behaviour)
        let log = CapturedLog()
        var configuration = APNsForwarder.Configuration()
        configuration.endpoints = [.sandbox: server.endpoint]
        configuration.broadcastEndpoints = [.sandbox: server.endpoint]
        configuration.client.engine = engine
        configuration.client.connectionsPerPool = 1
        let upstream = try APNsForwarder(
            configuration: configuration,
            credentials: UpstreamHarness.throwawayTokenCredentials(),
            logger: log.logger,
            metricsFactory: TestMetrics()
        )
        let clock = ContinuousClock()
        let started = clock.now
        var outcomes: [NotificationOutcome] = []
        for seed in 0..<Self.count {
            outcomes.append(
                try await upstream.send(
                    UpstreamHarness.notification(seed),
                    on: MultiThreadedEventLoopGroup.singleton.any()
                ).get()
            )
        }
        let elapsed = clock.now - started
        await upstream.shutdownAndWait()
        await server.close()

        #expect(outcomes.count == Self.count)
        #expect(
            outcomes.allSatisfy { $0 == expected },
            "engine \(engine) gave \(Set(outcomes.map { "\($0)" }).sorted())"
        )
        #expect(
            log.lines(at: .critical).isEmpty,
            "an upstream's behaviour is not a bug in the bridge: \(log.lines(at: .critical).first?.message ?? "")"
        )
        let loud = log.lines.filter { $0.level >= .warning }
        let bound = 1 + Int(elapsed / .seconds(10))
        #expect(
            loud.count <= bound,
            "\(loud.count) lines at warning or above in \(elapsed), at most \(bound): \(loud.prefix(3).map(\.message))"
        )
    }
}

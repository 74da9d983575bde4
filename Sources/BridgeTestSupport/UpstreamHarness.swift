import BridgeCore
import BridgeForwarding
import Crypto
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import Logging
import MetricsTestKit
import MockAPNs
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization
import UpstreamAPNs

extension Logger {
    /// A logger for tests: errors only, unless APNS_BRIDGE_TEST_LOG names a level (`debug`,
    /// `trace`) to show what the client and the mock do.
    package static func forTests(_ label: String = "apns-bridge.test") -> Logger {
        var logger = Logger(label: label)
        logger.logLevel =
            ProcessInfo.processInfo.environment["APNS_BRIDGE_TEST_LOG"].flatMap(Logger.Level.init(rawValue:)) ?? .error
        return logger
    }
}

/// A ``MockAPNsServer`` on 127.0.0.1 with a throwaway PKI and signing key, and the bridge's
/// upstream (``APNsForwarder``, its ``APNsClient``s) using authentication tokens against it:
/// the upstream tests drive this over real TLS and HTTP/2. The client's and the upstream's
/// metrics go to ``metrics``, a test factory of the harness's own.
package final class UpstreamHarness: Sendable {
    package static let keyID = "KEY1234567"
    package static let teamID = "TEAM123456"
    package static let topic = "com.example.app"

    package let pki: DevelopmentCA
    package let mock: MockAPNsServer
    package let client: APNsForwarder
    package let tokens: AuthenticationTokenSource
    package let clock: TestClock
    package let metrics: TestMetrics

    private init(
        pki: DevelopmentCA,
        mock: MockAPNsServer,
        client: APNsForwarder,
        tokens: AuthenticationTokenSource,
        clock: TestClock,
        metrics: TestMetrics
    ) {
        self.pki = pki
        self.mock = mock
        self.client = client
        self.tokens = tokens
        self.clock = clock
        self.metrics = metrics
    }

    /// A counter's total over all its label sets, or those that include `dimensions`.
    package func counter(_ label: String, _ dimensions: [(String, String)] = []) -> Int64 {
        self.metrics.counterTotal(label: label, dimensions: dimensions)
    }

    package static func start(
        configureMock: (inout MockAPNsConfiguration) -> Void = { _ in },
        configureClient: (inout APNsClient.Configuration) -> Void = { _ in }
    ) async throws -> UpstreamHarness {
        let pki = try DevelopmentCA()
        let clock = TestClock()
        let signingKey = P256.Signing.PrivateKey()
        var mockConfiguration = MockAPNsConfiguration(
            certificateChain: [pki.server.certificate],
            privateKey: pki.server.privateKey
        )
        mockConfiguration.port = 0
        mockConfiguration.signingKeys = [.init(keyID: keyID, teamID: teamID, publicKey: signingKey.publicKey)]
        mockConfiguration.topics = [topic, topic + ".voip"]
        mockConfiguration.now = clock.function
        configureMock(&mockConfiguration)
        let quiet = Logger.forTests()
        let mock = try await MockAPNsServer.start(configuration: mockConfiguration, logger: quiet)

        let metrics = TestMetrics()
        let tokens = AuthenticationTokenSource(
            signer: AuthenticationTokenSigner(key: signingKey, keyID: keyID, teamID: teamID),
            logger: quiet,
            metricsFactory: metrics,
            now: clock.function
        )
        var upstreamConfiguration = APNsForwarder.Configuration()
        var clientConfiguration = APNsClient.Configuration()
        let endpoint = APNsEndpoint(
            host: "127.0.0.1",
            port: mock.port,
            serverHostname: "localhost",
            trustRoots: .certificates([pki.caCertificate])
        )
        upstreamConfiguration.endpoints = [.sandbox: endpoint, .production: endpoint]
        upstreamConfiguration.broadcastEndpoints = [.sandbox: endpoint, .production: endpoint]
        clientConfiguration.reconnectBackoffBase = .milliseconds(20)
        clientConfiguration.reconnectBackoffLimit = .milliseconds(500)
        clientConfiguration.retryBackoffBase = .milliseconds(5)
        clientConfiguration.retryBackoffLimit = .milliseconds(200)
        // A request unanswered for the request timeout is reset and sent again, so a request the
        // mock had processed is then delivered twice (at-least-once, by design). With every
        // suite of a debug build running on 2 cores, the test process has been seen to stall
        // for over 10 s (the default timeout): counted deliveries then depended on the
        // machine's speed. The tests' timeout and budget only bound a hang; the tests of
        // timeouts and budgets set their own.
        clientConfiguration.requestTimeout = Self.requestTimeout
        clientConfiguration.retryBudget = Self.retryBudget
        configureClient(&clientConfiguration)
        upstreamConfiguration.client = clientConfiguration
        let client = try APNsForwarder(
            configuration: upstreamConfiguration,
            credentials: .token(tokens),
            logger: quiet,
            metricsFactory: metrics
        )
        return UpstreamHarness(pki: pki, mock: mock, client: client, tokens: tokens, clock: clock, metrics: metrics)
    }

    /// The tests' request timeout and retry budget: long enough that only a hang reaches them.
    package static let requestTimeout = TimeAmount.seconds(120)
    package static let retryBudget = TimeAmount.seconds(300)

    package static let tenant = Tenant(name: topic, topic: topic, environment: .sandbox)

    /// Authentication-token credentials with a throwaway key, for an upstream no key is checked by
    /// (``HostileHTTP2Server``).
    package static func throwawayTokenCredentials() -> APNsCredentials {
        let signer = AuthenticationTokenSigner(key: P256.Signing.PrivateKey(), keyID: keyID, teamID: teamID)
        return .token(AuthenticationTokenSource(signer: signer, logger: Logger.forTests()))
    }

    /// A notification for the harness's tenant; token `seed` is unique per seed.
    package static func notification(
        _ seed: Int,
        payload: ByteBuffer = FrameBuilder.payload(),
        expiration: UInt32 = 0,
        tenant: Tenant = UpstreamHarness.tenant
    ) -> ForwardedNotification {
        ForwardedNotification(
            tenant: tenant,
            frame: NotificationFrame(
                command: .itemized,
                identifier: NotificationIdentifier(rawValue: UInt32(truncatingIfNeeded: seed)),
                expiration: expiration,
                deviceToken: FrameBuilder.token(seed),
                payload: payload
            )
        )
    }

    /// The endpoint of the mock, as the harness's clients reach it.
    package var mockEndpoint: APNsEndpoint {
        APNsEndpoint(
            host: "127.0.0.1",
            port: self.mock.port,
            serverHostname: "localhost",
            trustRoots: .certificates([self.pki.caCertificate])
        )
    }

    /// Sends `notification` and waits for its outcome.
    package func send(_ notification: ForwardedNotification) async throws -> NotificationOutcome {
        try await self.client.send(notification, on: MultiThreadedEventLoopGroup.singleton.any()).get()
    }

    package func stop() async {
        await self.client.shutdownAndWait()
        await self.mock.close()
    }
}

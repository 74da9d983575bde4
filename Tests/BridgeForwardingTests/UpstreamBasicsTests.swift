import BridgeCore
import BridgeForwarding
import BridgeTestSupport
import Crypto
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import MetricsTestKit
import MockAPNs
import NIOCore
import NIOHPACK
import NIOPosix
import NIOSSL
import Testing
import UpstreamAPNs

@Suite("Upstream client against MockAPNs: requests and answers")
struct UpstreamBasicsTests {
    @Test("A notification arrives with the headers of docs/upstream.md#requests and HPACK as Apple asks")
    func headersAndIndexing() async throws {
        try await withResource(try await UpstreamHarness.start()) { harness throws in
            #expect(try await harness.send(UpstreamHarness.notification(1)) == .accepted)
            #expect(try await harness.send(UpstreamHarness.notification(2, expiration: 2_000_000_000)) == .accepted)

            let records = harness.mock.ledger.accepted
            try #require(records.count == 2)
            let first = records[0]
            #expect(first.token == FrameBuilder.token(1).hexDump(format: .compact))
            #expect(first.topic == UpstreamHarness.topic)
            #expect(first.pushType == "alert")
            #expect(first.priority == "10")
            #expect(first.expiration == "0")
            #expect(records[1].expiration == "2000000000")
            #expect(first.keyID == UpstreamHarness.keyID)
            #expect(String(buffer: first.payload) == #"{"aps":{"alert":"hello"}}"#)
            #expect(first.apnsID != nil && first.apnsID != records[1].apnsID)
            // :path and authorization never enter the dynamic table.
            #expect(records.allSatisfy { $0.pathIndexing == .nonIndexable })
            #expect(records.allSatisfy { $0.authorizationIndexing == .neverIndexed })
            #expect(harness.tokens.mintCount == 1)
        }
    }

    @Test(
        "The client on its own, from async code: send returns the answer; shutdownAndWait returns with every connection closed"
    )
    func asyncSendAndShutdown() async throws {
        try await withResource(try await UpstreamHarness.start()) { harness throws in
            let client = try #require(harness.client.client(.sandbox))
            let notification = UpstreamHarness.notification(7)
                .resent(as: ForwardedNotification.ID(high: 0x4c2e_0a18_5b3d_4e6f, low: 0x8a9b_0c1d_2e3f_4a5b))
            let request = APNsForwarder.request(for: notification)
            guard case .answered(let response) = await client.send(request) else {
                Issue.record("no answer")
                return
            }
            #expect(response.status == 200)
            #expect(harness.mock.ledger.accepted.last?.apnsID == "4c2e0a18-5b3d-4e6f-8a9b-0c1d2e3f4a5b")
            #expect(client.usableConnectionCount > 0)
            await client.shutdownAndWait()
            #expect(client.usableConnectionCount == 0)
            guard case .unanswered = await client.send(request) else {
                Issue.record("a request after the shutdown was answered")
                return
            }
        }
    }

    @Test("The client's metrics take their names' prefix from its configuration")
    func metricsPrefix() async throws {
        try await withResource(try await UpstreamHarness.start(configureClient: { $0.metricsPrefix = "example_push_" }))
        { harness throws in
            #expect(try await harness.send(UpstreamHarness.notification(1)) == .accepted)
            #expect(harness.counter("example_push_upstream_responses_total", [("status", "200")]) == 1)
            #expect(harness.counter("apns_bridge_upstream_responses_total", [("status", "200")]) == 0)
        }
    }

    @Test("Push type and priority are inferred from the topic and the payload")
    func pushTypeInference() async throws {
        try await withResource(try await UpstreamHarness.start()) { harness throws in
            let background = UpstreamHarness.notification(
                1,
                payload: FrameBuilder.payload(#"{"aps":{"content-available":1}}"#)
            )
            var voipTenant = UpstreamHarness.tenant
            voipTenant.topic = UpstreamHarness.topic + ".voip"
            let voip = UpstreamHarness.notification(2, payload: FrameBuilder.payload(length: 5000), tenant: voipTenant)
            let mixed = UpstreamHarness.notification(
                3,
                payload: FrameBuilder.payload(#"{"aps":{"content-available":1,"alert":"x"}}"#)
            )
            #expect(try await harness.send(background) == .accepted)
            #expect(try await harness.send(voip) == .accepted)
            #expect(try await harness.send(mixed) == .accepted)
            let byToken = Dictionary(uniqueKeysWithValues: harness.mock.ledger.accepted.map { ($0.token, $0) })
            let b = try #require(byToken[FrameBuilder.token(1).hexDump(format: .compact)])
            #expect(b.pushType == "background" && b.priority == "5")
            let v = try #require(byToken[FrameBuilder.token(2).hexDump(format: .compact)])
            #expect(v.pushType == "voip" && v.topic == UpstreamHarness.topic + ".voip")
            let m = try #require(byToken[FrameBuilder.token(3).hexDump(format: .compact)])
            #expect(m.pushType == "alert" && m.priority == "10")
        }
    }

    @Test("APNs reasons map to legacy outcomes (docs/upstream.md#outcomes)")
    func reasonMapping() async throws {
        try await withResource(try await UpstreamHarness.start()) { harness throws in
            let unregistered = FrameBuilder.token(10).hexDump(format: .compact)
            harness.mock.script.unregister(token: unregistered, atMilliseconds: 1_700_000_000_123)
            harness.mock.script.rejectAsBadToken(FrameBuilder.token(11).hexDump(format: .compact))
            #expect(try await harness.send(UpstreamHarness.notification(10)) == .unregistered(timestamp: 1_700_000_000))
            #expect(try await harness.send(UpstreamHarness.notification(11)) == .rejected(.invalidToken))
            // The mock validates the payload like APNs.
            #expect(
                try await harness.send(UpstreamHarness.notification(12, payload: ByteBuffer()))
                    == .rejected(.missingPayload)
            )
            #expect(
                try await harness.send(UpstreamHarness.notification(13, payload: FrameBuilder.payload(length: 4097)))
                    == .rejected(.invalidPayloadSize)
            )
            // A topic APNs refuses is the operator's problem: status 3.
            let wrongTopic = Tenant(name: "other", topic: "com.example.other", environment: .sandbox)
            #expect(
                try await harness.send(UpstreamHarness.notification(14, tenant: wrongTopic)) == .rejected(.missingTopic)
            )
            // Credentials refused: status 1.
            harness.mock.script.fail(1, status: 403, reason: .invalidProviderToken)
            #expect(try await harness.send(UpstreamHarness.notification(15)) == .rejected(.processingError))
            // A header APNs refuses means the bridge built a bad request: 255.
            harness.mock.script.fail(1, status: 400, reason: .badPriority)
            #expect(try await harness.send(UpstreamHarness.notification(16)) == .rejected(.unknown))
            #expect(
                harness.counter("apns_bridge_notifications_failed_total", [("status", "255")]) == 1,
                "one bridge bug counted"
            )
        }
    }

    @Test(
        "503, 500 and 429 twice then 200: delivered once, no failure reported",
        arguments: [
            (503, MockAPNsReason.serviceUnavailable), (500, MockAPNsReason.internalServerError),
            (429, MockAPNsReason.tooManyRequests),
        ]
    )
    func transientErrors(status: Int, reason: MockAPNsReason) async throws {
        try await withResource(try await UpstreamHarness.start()) { harness throws in
            harness.mock.script.fail(2, status: status, reason: reason)
            #expect(try await harness.send(UpstreamHarness.notification(1)) == .accepted)
            let records = harness.mock.ledger.records
            #expect(records.map(\.status) == [status, status, 200])
            #expect(Set(records.map(\.apnsID)).count == 1, "a retry keeps the apns-id")
            #expect(harness.mock.ledger.accepted.count == 1)
        }
    }

    @Test("After the retry budget: 429 is dropped silently, 503 becomes status 1")
    func retryBudgetExhausted() async throws {
        try await withResource(try await UpstreamHarness.start(configureClient: { $0.retryBudget = .seconds(3) })) {
            harness in
            // The connection is set up first (outside any budget), so that the short budget is spent
            // on retries, not on a TLS and HTTP/2 set-up that a loaded machine can make slow.
            harness.client.warmUp(.sandbox)
            try await eventually { harness.client.hasUsableConnection(.sandbox) }
            harness.mock.script.fail(
                1_000,
                status: 429,
                reason: .tooManyRequests,
                token: FrameBuilder.token(1).hexDump(format: .compact)
            )
            harness.mock.script.fail(
                1_000,
                status: 503,
                reason: .serviceUnavailable,
                token: FrameBuilder.token(2).hexDump(format: .compact)
            )
            #expect(try await harness.send(UpstreamHarness.notification(1)) == .dropped)
            #expect(try await harness.send(UpstreamHarness.notification(2)) == .gaveUp(.processingError))
            #expect(harness.mock.ledger.accepted.isEmpty)
        }
    }

    @Test("A notification whose expiry has passed is not retried")
    func expiredNotificationNotRetried() async throws {
        try await withResource(try await UpstreamHarness.start()) { harness throws in
            harness.mock.script.fail(5, status: 503, reason: .serviceUnavailable)
            let expired = UInt32(Date().timeIntervalSince1970) - 1
            #expect(
                try await harness.send(UpstreamHarness.notification(1, expiration: expired))
                    == .gaveUp(.processingError)
            )
            #expect(harness.mock.ledger.records.count == 1)
        }
    }
}

@Suite("Upstream client against MockAPNs: flow control")
struct UpstreamFlowControlTests {
    @Test("More than 64 KB of bodies each way on one connection: the connection windows are replenished")
    func connectionWindows() async throws {
        try await withResource(try await UpstreamHarness.start(configureClient: { $0.connectionsPerPool = 1 })) {
            harness in
            // Requests: 40 × 4,000 bytes = 160 KB towards the mock.
            for seed in 0..<40 {
                #expect(
                    try await harness.send(
                        UpstreamHarness.notification(seed, payload: FrameBuilder.payload(length: 4_000))
                    ) == .accepted
                )
            }
            // Answers: 3,000 error bodies of about 30 bytes = 90 KB towards the client.
            for seed in 100..<3_100 {
                harness.mock.script.rejectAsBadToken(FrameBuilder.token(seed).hexDump(format: .compact))
            }
            let outcomes = try await sendMany(harness, count: 3_000, concurrency: 50, seedOffset: 100)
            let histogram = Dictionary(grouping: outcomes.values, by: { "\($0)" }).mapValues(\.count)
            #expect(histogram == ["\(NotificationOutcome.rejected(.invalidToken))": 3_000])
            #expect(harness.client.connectionsOpened(.sandbox) == 1)
        }
    }
}

@Suite("Upstream client against MockAPNs: certificate credentials")
struct UpstreamCertificateTests {
    @Test(
        "A client certificate stands in for authentication tokens; a token from an unknown key is a credential failure (status 1)"
    )
    func certificateCredentials() async throws {
        let pki = try DevelopmentCA()
        var mockConfiguration = MockAPNsConfiguration(
            certificateChain: [pki.server.certificate],
            privateKey: pki.server.privateKey
        )
        mockConfiguration.port = 0
        mockConfiguration.clientCertificateTrustRoots = .certificates([pki.caCertificate])
        try await withResource(try await MockAPNsServer.start(configuration: mockConfiguration, logger: .forTests())) {
            mock in

            let metrics = TestMetrics()
            func client(certificate: Bool) throws -> APNsForwarder {
                var configuration = APNsForwarder.Configuration()
                configuration.endpoints = [
                    .sandbox: APNsEndpoint(
                        host: "127.0.0.1",
                        port: mock.port,
                        serverHostname: "localhost",
                        trustRoots: .certificates([pki.caCertificate])
                    )
                ]
                let identity = try pki.providerIdentity(bundleID: UpstreamHarness.topic)
                let credentials: APNsCredentials =
                    certificate
                    ? .certificate(chain: [identity.certificate], privateKey: identity.privateKey)
                    : .token(
                        AuthenticationTokenSource(
                            signer: AuthenticationTokenSigner(key: .init(), keyID: "UNKNOWNKEY", teamID: "TEAM123456"),
                            logger: .forTests()
                        )
                    )
                return try APNsForwarder(
                    configuration: configuration,
                    credentials: credentials,
                    logger: .forTests(),
                    metricsFactory: metrics
                )
            }

            let withCertificate = try client(certificate: true)
            defer { withCertificate.shutdown() }
            #expect(
                try await withCertificate.send(
                    UpstreamHarness.notification(1),
                    on: MultiThreadedEventLoopGroup.singleton.any()
                ).get() == .accepted
            )
            let record = try #require(mock.ledger.accepted.first)
            #expect(record.keyID == nil && record.authorizationIndexing == nil, "no authentication token was sent")

            // A token signed by a key the server does not know: a credential failure, status 1.
            let withUnknownKey = try client(certificate: false)
            defer { withUnknownKey.shutdown() }
            #expect(
                try await withUnknownKey.send(
                    UpstreamHarness.notification(2),
                    on: MultiThreadedEventLoopGroup.singleton.any()
                ).get() == .rejected(.processingError)
            )
            #expect(mock.ledger.records.last?.reason == .invalidProviderToken)
            #expect(
                metrics.counterTotal(
                    label: "apns_bridge_notifications_failed_total",
                    dimensions: [("status", "1"), ("reason", "InvalidProviderToken")]
                ) == 1,
                "the credential failure is counted with its reason"
            )
        }
    }
}

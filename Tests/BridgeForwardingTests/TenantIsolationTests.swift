import BridgeCore
import BridgeForwarding
import BridgeServer
import BridgeTestSupport
import DevelopmentPKI
import LegacyClient
import LegacyProtocol
import MockAPNs
import NIOCore
import NIOPosix
import Testing
import UpstreamAPNs

/// One tenant cannot break the upstream connections it shares with others:
/// every value that becomes a header is checked where it enters, and the client refuses to send
/// a header HTTP/2 cannot carry, so a bad request fails alone.
@Suite("Tenant isolation on a shared upstream")
struct TenantIsolationTests {
    /// A `UID=` with a CR/LF in it: as an `apns-topic`, a peer refuses it with PROTOCOL_ERROR.
    static let hostileUserID = UpstreamHarness.topic + "\r\napns-priority: 5"

    @Test(
        "Topics: a bundle id with an optional push-type suffix",
        arguments: [
            ("com.example.app", true), ("com.example.app.voip", true), ("com.example.app.push-type.liveactivity", true),
            ("com.example.my_app", true), ("web.com.example", true),
            ("", false), ("com..example", false), (".com.example", false), ("com.example.", false),
            ("com.example app", false),
            ("com.example.app\r\nx: y", false), ("com.example.app\u{0}", false), ("com.exämple", false),
            (String(repeating: "a", count: 256), false),
        ]
    )
    func topicGrammar(topic: String, valid: Bool) {
        #expect(Tenant.isValidTopic(topic) == valid)
    }

    @Test("The client's check: which header of a request HTTP/2 cannot carry")
    func unsendableHeaders() {
        func device(topic: String?, apnsID: String = "0b3a4c1e-0f9d-4b6a-9c2d-6a1f3e5b7c9d") -> APNsRequest {
            APNsRequest(
                deviceToken: ByteBuffer(repeating: 1, count: 32),
                topic: topic,
                pushType: .alert,
                priority: 10,
                expiration: 0,
                id: APNsRequestID(apnsID),
                payload: ByteBuffer()
            )
        }
        #expect(device(topic: "com.example.app").unsendableHeader == nil)
        #expect(device(topic: nil).unsendableHeader == nil)
        #expect(device(topic: "com.example.app\r\nx: y").unsendableHeader == "apns-topic")
        #expect(device(topic: " com.example.app").unsendableHeader == "apns-topic")
        #expect(device(topic: "com.example.app\t").unsendableHeader == "apns-topic")
        #expect(device(topic: "com.example\u{7F}").unsendableHeader == "apns-topic")
        #expect(device(topic: "com.example.app", apnsID: "a\nb").unsendableHeader == "apns-id")
        let broadcast = APNsRequest.broadcast(
            bundleID: "com.example.app",
            channelID: "dHdv\r\n",
            priority: 10,
            expiration: 0,
            requestID: "r",
            payload: ByteBuffer()
        )
        #expect(broadcast.unsendableHeader == "apns-channel-id")
        let management = APNsRequest.channelManagement(
            method: "GET",
            path: "/1/apps/com.example\napp/all-channels",
            channelID: nil,
            requestID: "r"
        )
        #expect(management.unsendableHeader == ":path")
    }

    @Test(
        "A tenant whose topic HTTP/2 cannot carry fails alone with status 3; the other tenant's notifications on the same connections all succeed, none retried"
    )
    func malformedTopicFailsAlone() async throws {
        try await withResource(try await UpstreamHarness.start()) { harness in
            // One answered notification first: the connection is up and takes many streams.
            #expect(try await harness.send(UpstreamHarness.notification(0)) == .accepted)
            let connections = harness.mock.ledger.counters.connectionsAccepted
            // A tenant whose topic came in without the entry checks (as a future code path might).
            let hostile = Tenant(name: "hostile", topic: Self.hostileUserID, environment: .sandbox)
            let outcomes = try await withThrowingTaskGroup(of: (Bool, NotificationOutcome).self) { group in
                for seed in 1...40 {
                    let isHostile = seed % 4 == 0
                    let notification = UpstreamHarness.notification(
                        seed,
                        tenant: isHostile ? hostile : UpstreamHarness.tenant
                    )
                    group.addTask { (isHostile, try await harness.send(notification)) }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(
                outcomes.filter(\.0).allSatisfy { $0.1 == .rejected(.missingTopic) },
                "the hostile tenant's: status 3, the topic is the tenant's"
            )
            #expect(outcomes.filter { !$0.0 }.allSatisfy { $0.1 == .accepted }, "the good tenant's: all delivered")
            #expect(harness.mock.ledger.accepted.count == 1 + 30)
            #expect(
                harness.mock.ledger.records.allSatisfy { $0.topic == UpstreamHarness.topic },
                "nothing of the hostile tenant reached the wire"
            )
            #expect(
                harness.mock.ledger.counters.connectionsAccepted == connections,
                "no connection was closed and replaced"
            )
            #expect(harness.counter("apns_bridge_upstream_retries_total") == 0, "nothing was retried")
        }
    }

    @Test(
        "Through the gateway: a certificate whose UID= is not a bundle id is refused at the handshake; the good tenant on the same credentials is served",
        arguments: [false, true]
    )
    func hostileCertificateRefusedAtHandshake(pinnedWithoutTopic: Bool) async throws {
        try await withResource(try await UpstreamHarness.start()) { harness in
            let hostileIdentity = try harness.pki.providerIdentity(bundleID: Self.hostileUserID)
            // Unlisted certificates accepted (their UID= is the topic), or a tenant that pins the
            // hostile certificate's fingerprint and configures no topic (the UID= again).
            let rules =
                pinnedWithoutTopic
                ? [
                    TenantRule(
                        name: "pinned",
                        fingerprints: [try ProviderCertificate(hostileIdentity.certificate).fingerprint],
                        environment: .sandbox
                    )
                ]
                : []
            let resolver = ConfiguredTenantResolver(
                rules: rules,
                defaultEnvironment: .sandbox,
                acceptsUnlistedCertificates: true
            )
            try await withResource(
                try await GatewayServer.start(
                    configuration: .loopback(pki: harness.pki),
                    forwarder: harness.client,
                    resendRecords: InMemoryResendRecordStore(),
                    feedback: InMemoryFeedbackRecorder(),
                    tenantResolver: resolver,
                    logger: .forTests()
                )
            ) { gateway in

                let hostile = try await LegacyConnection.connect(
                    to: gateway.localAddress,
                    identity: hostileIdentity,
                    trusting: harness.pki.caCertificate
                )
                try? await hostile.send(
                    FrameBuilder.frame(
                        .itemized,
                        identifier: 1,
                        token: FrameBuilder.token(1),
                        payload: FrameBuilder.payload()
                    )
                )
                #expect(
                    try await hostile.bytesUntilClose().readableBytes == 0,
                    "refused during the handshake: no error-response, nothing read"
                )

                let good = try await LegacyConnection.connect(
                    to: gateway.localAddress,
                    identity: try harness.pki.providerIdentity(bundleID: UpstreamHarness.topic, sandboxMarker: true),
                    trusting: harness.pki.caCertificate
                )
                var batch = ByteBuffer()
                for seed in 2...51 {
                    batch.writeImmutableBuffer(
                        FrameBuilder.frame(
                            .itemized,
                            identifier: UInt32(seed),
                            token: FrameBuilder.token(seed),
                            payload: FrameBuilder.payload()
                        )
                    )
                }
                try await good.send(batch)
                try await good.closeOutput()
                #expect(
                    try await good.bytesUntilClose(timeout: .seconds(30)).readableBytes == 0,
                    "every notification accepted"
                )
                #expect(harness.mock.ledger.accepted.count == 50)
                #expect(harness.mock.ledger.records.allSatisfy { $0.topic == UpstreamHarness.topic })
                #expect(harness.counter("apns_bridge_upstream_retries_total") == 0)
            }
        }
    }
}

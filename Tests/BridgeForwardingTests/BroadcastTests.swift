import BridgeCore
import BridgeForwarding
import BridgeServer
import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import Logging
import MockAPNs
import NIOCore
import NIOHPACK
import NIOPosix
import Testing
import UpstreamAPNs

/// Broadcast push: a frame to a tenant's channel token becomes a broadcast to a Live
/// Activity channel, over real TLS and HTTP/2 to MockAPNs, whose broadcast and channel
/// management APIs validate like Apple's.
@Suite("Broadcast push through channel tokens")
struct BroadcastTests {
    static let topic = UpstreamHarness.topic

    /// The harness's tenant with one channel (made on the mock) reached by its derived token.
    static func tenant(
        _ harness: UpstreamHarness,
        storagePolicy: Int = 1,
        storesMessages: Bool? = nil,
        topic: String = BroadcastTests.topic
    ) throws -> (tenant: Tenant, channel: BroadcastChannel) {
        let id = try #require(harness.mock.channels.create(bundleID: Self.topic, storagePolicy: storagePolicy))
        let channel = BroadcastChannel(
            name: "live",
            id: id,
            token: ChannelToken.derive(tenant: "app", channelID: id),
            storesMessages: storesMessages
        )
        var tenant = UpstreamHarness.tenant
        tenant.topic = topic
        tenant.channels = BroadcastChannels([channel])
        return (tenant, channel)
    }

    static func notification(
        to token: ByteBuffer,
        tenant: Tenant,
        identifier: UInt32 = 1,
        expiration: UInt32 = 0,
        priority: UInt8 = 10,
        payload: ByteBuffer = FrameBuilder.payload(#"{"aps":{"event":"update","timestamp":1,"content-state":{}}}"#)
    ) -> ForwardedNotification {
        ForwardedNotification(
            tenant: tenant,
            frame: NotificationFrame(
                command: .itemized,
                identifier: NotificationIdentifier(rawValue: identifier),
                expiration: expiration,
                priority: priority,
                deviceToken: token,
                payload: payload
            )
        )
    }

    @Test("A frame to a channel token arrives as POST /4/broadcasts/apps/<bundle id> with the broadcast headers")
    func broadcastHeaders() async throws {
        try await withResource(
            try await UpstreamHarness.start(configureMock: { $0.topics?.insert(Self.topic + ".push-type.liveactivity") }
            )
        ) { harness in
            // A Live Activity topic: the broadcast path names the bundle id without the suffix.
            let (tenant, channel) = try Self.tenant(harness, topic: Self.topic + ".push-type.liveactivity")
            let payload = FrameBuilder.payload(length: 5000)
            #expect(
                try await harness.send(
                    Self.notification(
                        to: channel.token,
                        tenant: tenant,
                        expiration: 2_000_000_000,
                        priority: 1,
                        payload: payload
                    )
                ) == .accepted
            )
            // A device token of the same tenant still goes to the device API.
            #expect(
                try await harness.send(Self.notification(to: FrameBuilder.token(7), tenant: tenant, identifier: 2))
                    == .accepted
            )

            let records = harness.mock.ledger.records
            try #require(records.count == 2)
            let broadcast = try #require(records.first { $0.api == .broadcast })
            #expect(broadcast.status == 200)
            #expect(broadcast.method == "POST")
            #expect(broadcast.path == "/4/broadcasts/apps/\(Self.topic)")
            #expect(broadcast.channelID == channel.id)
            #expect(broadcast.pushType == "liveactivity")
            #expect(broadcast.priority == "1")
            #expect(broadcast.expiration == "2000000000")
            #expect(broadcast.topic == nil)
            #expect(broadcast.apnsID == nil)
            let requestID = try #require(broadcast.requestID)
            #expect(UUID(uuidString: requestID) != nil)
            #expect(broadcast.keyID == UpstreamHarness.keyID)
            #expect(broadcast.payload == payload)
            #expect(broadcast.authorizationIndexing == .neverIndexed)
            let device = try #require(records.first { $0.api == .device })
            #expect(device.path == nil && device.token == FrameBuilder.token(7).hexDump(format: .compact))
            #expect(device.topic == Self.topic + ".push-type.liveactivity")

            #expect(harness.counter("apns_bridge_broadcasts_forwarded_total") == 1)
            #expect(harness.counter("apns_bridge_notifications_forwarded_total") == 1)
        }
    }

    @Test("A channel that stores no messages gets expiration 0; unconfigured, APNs' BadExpirationDate is status 255")
    func noMessageStoredChannel() async throws {
        try await withResource(try await UpstreamHarness.start()) { harness in
            let (configured, channel) = try Self.tenant(harness, storagePolicy: 0, storesMessages: false)
            #expect(
                try await harness.send(
                    Self.notification(to: channel.token, tenant: configured, expiration: 2_000_000_000)
                ) == .accepted
            )
            #expect(harness.mock.ledger.accepted.last?.expiration == "0")

            var unconfigured = configured
            unconfigured.channels = BroadcastChannels([
                BroadcastChannel(name: "live", id: channel.id, token: channel.token)
            ])
            #expect(
                try await harness.send(
                    Self.notification(to: channel.token, tenant: unconfigured, expiration: 2_000_000_000)
                ) == .rejected(.unknown)
            )
            #expect(harness.mock.ledger.records.last?.reason == .badExpirationDate)
            #expect(
                try await harness.send(Self.notification(to: channel.token, tenant: unconfigured, expiration: 0))
                    == .accepted
            )
        }
    }

    @Test("Every broadcast reason maps to its legacy status, as docs/upstream.md#outcomes does for devices")
    func reasonsMapToLegacyStatuses() async throws {
        try await withResource(try await UpstreamHarness.start()) { harness in
            let (tenant, channel) = try Self.tenant(harness)
            let cases: [(status: Int, reason: MockAPNsReason, expected: NotificationOutcome)] = [
                (400, .featureNotEnabled, .rejected(.missingTopic)),
                (400, .missingChannelId, .rejected(.invalidToken)),
                (400, .badChannelId, .rejected(.invalidToken)),
                (400, .badRequestParams, .rejected(.unknown)),
                (400, .badRequestPayload, .rejected(.unknown)),
                (400, .payloadEmpty, .rejected(.missingPayload)),
                (400, .badMessageId, .rejected(.unknown)),
                (400, .missingPushType, .rejected(.unknown)),
                (400, .invalidPushType, .rejected(.unknown)),
                (400, .cannotCreateChannelConfig, .rejected(.unknown)),
                (400, .badExpirationDate, .rejected(.unknown)),
                (400, .topicDisallowed, .rejected(.missingTopic)),
                (400, .badPriority, .rejected(.unknown)),
                (403, .badCertificate, .rejected(.processingError)),
                (403, .badCertificateEnvironment, .rejected(.processingError)),
                (403, .topicMismatch, .rejected(.missingTopic)),
                (403, .missingProviderToken, .rejected(.processingError)),
                (403, .invalidProviderToken, .rejected(.processingError)),
                (404, .badPath, .rejected(.unknown)),
                (405, .methodNotAllowed, .rejected(.unknown)),
                (413, .payloadTooLarge, .rejected(.invalidPayloadSize)),
                // Answers the client cures by itself: one attempt more, then accepted.
                (403, .expiredProviderToken, .accepted),
                (429, .tooManyRequests, .accepted),
                (429, .tooManyProviderTokenUpdates, .accepted),
                (500, .internalServerError, .accepted),
                (503, .serviceUnavailable, .accepted),
                (503, .shutdown, .accepted),
            ]
            for (index, item) in cases.enumerated() {
                harness.mock.script.fail(1, status: item.status, reason: item.reason, channel: channel.id)
                let outcome = try await harness.send(
                    Self.notification(to: channel.token, tenant: tenant, identifier: UInt32(index))
                )
                #expect(outcome == item.expected, "\(item.status) \(item.reason)")
            }
            #expect(
                harness.counter(
                    "apns_bridge_broadcasts_failed_total",
                    [("status", "3"), ("reason", "FeatureNotEnabled")]
                ) == 1
            )
            #expect(
                harness.counter("apns_bridge_broadcasts_failed_total", [("status", "8"), ("reason", "BadChannelId")])
                    == 1
            )
            #expect(harness.counter("apns_bridge_notifications_failed_total") == 0)

            // A channel APNs does not know: the channel token goes on the feedback list, now.
            let before = UInt32(Date().timeIntervalSince1970)
            harness.mock.channels.delete(channel.id, bundleID: Self.topic)
            let gone = try await harness.send(Self.notification(to: channel.token, tenant: tenant))
            guard case .unregistered(let timestamp) = gone else {
                Issue.record("ChannelNotRegistered gave \(gone)")
                return
            }
            #expect(timestamp >= before && timestamp <= UInt32(Date().timeIntervalSince1970))
            #expect(harness.mock.ledger.records.last?.reason == .channelNotRegistered)
        }
    }

    @Test("Throttling and 5xx that outlast the retry budget: dropped after 429, status 1 after 5xx")
    func retryBudgetRunsOut() async throws {
        try await withResource(try await UpstreamHarness.start(configureClient: { $0.retryBudget = .seconds(3) })) {
            harness in
            let (tenant, channel) = try Self.tenant(harness)
            // The broadcast connection is set up first: the short budget is for the 429s, and a
            // loaded machine's TLS handshake must not use it up (that would be a give-up, not a
            // drop). An attempt that gives up meanwhile leaves the pool connecting, so one soon
            // gets through.
            try await eventually("the broadcast connection", timeout: .seconds(30), interval: .milliseconds(50)) {
                try await harness.send(Self.notification(to: channel.token, tenant: tenant)) == .accepted
            }
            harness.mock.script.fail(1000, status: 429, reason: .tooManyRequests, channel: channel.id)
            #expect(try await harness.send(Self.notification(to: channel.token, tenant: tenant)) == .dropped)
            // The 429 rule still has attempts left; a second channel gets only 503s.
            let second = try #require(harness.mock.channels.create(bundleID: Self.topic, storagePolicy: 1))
            let other = BroadcastChannel(
                name: "other",
                id: second,
                token: ChannelToken.derive(tenant: "app", channelID: second)
            )
            harness.mock.script.fail(1000, status: 503, reason: .serviceUnavailable, channel: second)
            var withOther = tenant
            withOther.channels = BroadcastChannels([channel, other])
            #expect(
                try await harness.send(Self.notification(to: other.token, tenant: withOther))
                    == .gaveUp(.processingError)
            )
        }
    }

    @Test(
        "Through the gateway: 5,120-byte limit, a deleted channel on the feedback list, FeatureNotEnabled as status 3"
    )
    func throughTheGateway() async throws {
        try await withResource(try await UpstreamHarness.start()) { harness in
            let live = try #require(harness.mock.channels.create(bundleID: Self.topic, storagePolicy: 1))
            let ended = try #require(harness.mock.channels.create(bundleID: Self.topic, storagePolicy: 1))
            let channels = [
                BroadcastChannel(name: "live", id: live, token: ChannelToken.derive(tenant: "app", channelID: live)),
                BroadcastChannel(name: "ended", id: ended, token: ChannelToken.derive(tenant: "app", channelID: ended)),
            ]
            harness.mock.channels.delete(ended, bundleID: Self.topic)
            let feedback = InMemoryFeedbackRecorder()
            try await withResource(
                try await GatewayServer.start(
                    configuration: .loopback(pki: harness.pki),
                    forwarder: harness.client,
                    resendRecords: InMemoryResendRecordStore(),
                    feedback: feedback,
                    tenantResolver: ConfiguredTenantResolver(
                        rules: [
                            TenantRule(
                                name: "app",
                                userID: Self.topic,
                                environment: .sandbox,
                                channels: BroadcastChannels(channels)
                            )
                        ],
                        defaultEnvironment: .sandbox
                    ),
                    logger: .forTests()
                )
            ) { gateway in
                func connect() async throws -> LegacyConnection {
                    try await LegacyConnection.connect(
                        to: gateway.localAddress,
                        identity: try harness.pki.providerIdentity(bundleID: Self.topic),
                        trusting: harness.pki.caCertificate
                    )
                }

                // 5,000 bytes to the channel token is a broadcast (limit 5,120); to the ended channel,
                // APNs says ChannelNotRegistered, which the provider does not see.
                let client = try await connect()
                var frames = FrameBuilder.frame(
                    .itemized,
                    identifier: 1,
                    token: channels[0].token,
                    payload: FrameBuilder.payload(length: 5000)
                )
                frames.writeImmutableBuffer(
                    FrameBuilder.frame(
                        .itemized,
                        identifier: 2,
                        token: channels[1].token,
                        payload: FrameBuilder.payload()
                    )
                )
                try await client.send(frames)
                #expect(await harness.mock.ledger.waitForRecords { $0.count == 2 })
                #expect(
                    await harness.mock.ledger.waitForRecords { records in
                        records.contains { $0.reason == .channelNotRegistered }
                    }
                )
                // The same 5,000 bytes to a device token: status 7 from the gateway itself.
                try await client.send(
                    FrameBuilder.frame(
                        .itemized,
                        identifier: 3,
                        token: FrameBuilder.token(3),
                        payload: FrameBuilder.payload(length: 5000)
                    )
                )
                var received = try await client.bytesUntilClose()
                #expect(
                    received.readErrorResponse()
                        == ErrorResponsePacket(status: .invalidPayloadSize, identifier: .init(rawValue: 3))
                )
                // Frame 3's error waits for frames 1 and 2, and a 410-like outcome is done only once its
                // feedback entry is stored: the entry is there when the error response arrives.
                let entries = feedback.allEntries
                #expect(entries.count == 1)
                #expect(entries.first?.deviceToken == channels[1].token && entries.first?.tenant == "app")
                #expect(
                    harness.mock.ledger.records.filter { $0.api == .broadcast && $0.wasAccepted }.map(\.channelID) == [
                        live
                    ]
                )

                // Broadcast push not enabled for the app: status 3, as for a refused topic.
                harness.mock.script.fail(1, status: 400, reason: .featureNotEnabled, channel: live)
                let second = try await connect()
                try await second.send(
                    FrameBuilder.frame(
                        .itemized,
                        identifier: 9,
                        token: channels[0].token,
                        payload: FrameBuilder.payload()
                    )
                )
                var refused = try await second.bytesUntilClose()
                #expect(
                    refused.readErrorResponse()
                        == ErrorResponsePacket(status: .missingTopic, identifier: .init(rawValue: 9))
                )
            }
        }
    }

    @Test("The channel management client creates, reads, lists and deletes channels on the mock")
    func channelManagementClient() async throws {
        try await withResource(try await UpstreamHarness.start()) { harness in
            let client = try APNsChannelManagementClient(
                endpoint: harness.mockEndpoint,
                credentials: .token(harness.tokens),
                logger: .forTests()
            )
            defer { client.shutdown() }
            let first = try await client.create(bundleID: Self.topic, messageStoragePolicy: .noMessageStored)
            let second = try await client.create(bundleID: Self.topic, messageStoragePolicy: .mostRecentMessageStored)
            #expect(try await client.channelIDs(bundleID: Self.topic) == [first, second])
            let info = try await client.channel(first, bundleID: Self.topic)
            #expect(
                info == APNsChannelInfo(id: first, messageStoragePolicy: .noMessageStored, pushType: "LiveActivity")
            )
            try await client.delete(first, bundleID: Self.topic)
            #expect(try await client.channelIDs(bundleID: Self.topic) == [second])
            let error = await #expect(throws: APNsChannelManagementError.self) {
                try await client.channel(first, bundleID: Self.topic)
            }
            #expect(error?.status == 400 && error?.reason == .channelNotRegistered)
            // The mock refuses a topic it does not serve, as APNs refuses an app without broadcast.
            let other = await #expect(throws: APNsChannelManagementError.self) {
                try await client.create(bundleID: "com.example.other", messageStoragePolicy: .noMessageStored)
            }
            #expect(other?.reason == .topicDisallowed)
            let creates = harness.mock.ledger.records.filter { $0.api == .channelManagement && $0.method == "POST" }
            #expect(
                creates.count == 3
                    && creates.allSatisfy { $0.path == "/1/apps/\($0.path?.split(separator: "/")[2] ?? "")/channels" }
            )
        }
    }

    @Test("Derived channel tokens: 32 bytes, the same every time, different per tenant")
    func derivedTokens() {
        let id = "dHN0LXNyY2gtY2hubA=="
        let token = ChannelToken.derive(tenant: "shop", channelID: id)
        #expect(token.readableBytes == 32)
        #expect(token == ChannelToken.derive(tenant: "shop", channelID: id))
        #expect(token != ChannelToken.derive(tenant: "news", channelID: id))
        #expect(token != ChannelToken.derive(tenant: "shop", channelID: "b3RoZXI="))
        #expect(ChannelToken.parse(hex: ChannelToken.hex(token)) == token)
        #expect(ChannelToken.parse(hex: ChannelToken.hex(token).uppercased()) == token)
        #expect(ChannelToken.parse(hex: "zz" + ChannelToken.hex(token).dropFirst(2)) == nil)
        #expect(ChannelToken.isValidChannelID(id))
        for bad in ["", "abc", "a b=", "====", "abc==="] {
            #expect(!ChannelToken.isValidChannelID(bad), "\(bad)")
        }
    }

}

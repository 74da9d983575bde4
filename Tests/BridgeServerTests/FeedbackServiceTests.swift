import BridgeCore
import BridgeServer
import BridgeStores
import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import MockAPNs
import NIOCore
import NIOPosix
import Testing

/// The feedback listener over real TLS on loopback, with each store (docs/feedback.md).
@Suite("Feedback service")
struct FeedbackServiceTests {
    static let eventLoop = MultiThreadedEventLoopGroup.singleton.any()

    /// The gateway, the HTTP/2 client, MockAPNs and the feedback listener on one store.
    struct Bridge: ScopedResource {
        var upstream: UpstreamHarness
        var store: any BridgeStore
        var gateway: GatewayServer
        var feedback: FeedbackServer

        static func start(
            _ kind: StoreKind,
            configure: (inout FeedbackConfiguration) -> Void = { _ in }
        ) async throws -> Bridge {
            let upstream = try await UpstreamHarness.start()
            let store = try await kind.open(try await kind.makeLocation())
            let resolver = CertificateSubjectTenantResolver(environment: .sandbox)
            let gateway = try await GatewayServer.start(
                configuration: .loopback(pki: upstream.pki),
                forwarder: upstream.client,
                resendRecords: store,
                feedback: store,
                tenantResolver: resolver,
                logger: .forTests()
            )
            var configuration = FeedbackConfiguration.loopback(pki: upstream.pki)
            configure(&configuration)
            let feedback = try await FeedbackServer.start(
                configuration: configuration,
                store: store,
                tenantResolver: resolver,
                logger: .forTests()
            )
            return Bridge(upstream: upstream, store: store, gateway: gateway, feedback: feedback)
        }

        func poll(
            bundleID: String = UpstreamHarness.topic,
            closeAfterBytes: Int? = nil
        ) async throws -> FeedbackPoller.Poll {
            try await FeedbackPoller.poll(
                self.feedback.localAddress,
                identity: try self.upstream.pki.providerIdentity(bundleID: bundleID),
                trusting: self.upstream.pki.caCertificate,
                closeAfterBytes: closeAfterBytes
            )
        }

        func record(_ count: Int, tenant: String = UpstreamHarness.topic, first: Int = 0, length: Int = 32) async throws
        {
            let futures = (first..<first + count).map {
                self.store.apply(
                    .unregistered(
                        FeedbackEntry(
                            tenant: tenant,
                            environment: .sandbox,
                            deviceToken: FrameBuilder.token($0, length: length),
                            timestamp: 1_700_000_000
                        )
                    ),
                    on: FeedbackServiceTests.eventLoop
                )
            }
            try await EventLoopFuture.andAllSucceed(futures, on: FeedbackServiceTests.eventLoop).get()
        }

        func run() async {
            async let gateway: Void = self.gateway.run()
            async let feedback: Void = self.feedback.run()
            _ = await (gateway, feedback)
        }

        func cleanUp() async {
            await self.feedback.close()
            await self.gateway.close()
            await self.upstream.stop()
            await self.store.close()
        }
    }

    @Test(
        "A 410 through the gateway is served once on the feedback port, with the upstream's time in seconds; a 200 removes an entry",
        arguments: StoreKind.available
    )
    func unregisteredThroughTheGateway(kind: StoreKind) async throws {
        try await withResource(try await Bridge.start(kind)) { bridge in
            let gone = FrameBuilder.token(410)
            let back = FrameBuilder.token(411)
            bridge.upstream.mock.script.unregister(
                token: gone.hexDump(format: .compact),
                atMilliseconds: 1_767_225_600_999
            )
            bridge.upstream.mock.script.unregister(
                token: back.hexDump(format: .compact),
                atMilliseconds: 1_767_225_600_000
            )

            let provider = try await LegacyConnection.connect(
                to: bridge.gateway.localAddress,
                identity: try bridge.upstream.pki.providerIdentity(bundleID: UpstreamHarness.topic),
                trusting: bridge.upstream.pki.caCertificate
            )
            var frames = ByteBuffer()
            frames.writeImmutableBuffer(
                FrameBuilder.frame(.itemized, identifier: 1, token: gone, payload: FrameBuilder.payload())
            )
            frames.writeImmutableBuffer(
                FrameBuilder.frame(.itemized, identifier: 2, token: back, payload: FrameBuilder.payload())
            )
            try await provider.send(frames)
            // The first upstream connection and the group commit: slow on a loaded debug build.
            try await eventually(timeout: .seconds(60)) { try await bridge.store.pendingCount() == 2 }

            // Token 411 registers again: a later 200 takes it off the list.
            bridge.upstream.mock.script.reregister(token: back.hexDump(format: .compact))
            try await provider.send(
                FrameBuilder.frame(.itemized, identifier: 3, token: back, payload: FrameBuilder.payload())
            )
            try await eventually(timeout: .seconds(60)) { try await bridge.store.pendingCount() == 1 }
            await provider.close()

            let poll = try await bridge.poll()
            #expect(poll.cleanClose)
            #expect(poll.tuples == [FeedbackTuple(timestamp: 1_767_225_600, deviceToken: gone)])
            let again = try await bridge.poll()
            #expect(again.cleanClose, "an empty list: closed at once, cleanly")
            #expect(again.tupleCount == 0)
        }
    }

    @Test("A provider certificate for app B never receives app A's tokens", arguments: StoreKind.available)
    func tenantIsolation(kind: StoreKind) async throws {
        try await withResource(try await Bridge.start(kind)) { bridge in
            try await bridge.record(30, tenant: "com.example.a")
            try await bridge.record(20, tenant: "com.example.b", first: 1000)
            let b = try await bridge.poll(bundleID: "com.example.b")
            #expect(b.tupleCount == 20)
            #expect(b.tuples.allSatisfy { $0.deviceToken.getInteger(at: 0, as: UInt32.self)! >= 1000 })
            #expect(try await bridge.poll(bundleID: "com.example.b").tupleCount == 0)
            #expect(try await bridge.poll(bundleID: "com.example.c").tupleCount == 0)
            let a = try await bridge.poll(bundleID: "com.example.a")
            #expect(a.tupleCount == 30)
        }
    }

    @Test("A poller that hangs up midway gets the rest next time, never an entry twice", arguments: StoreKind.available)
    func pollerHangsUp(kind: StoreKind) async throws {
        try await withResource(
            try await Bridge.start(kind) {
                $0.drain.batchSize = 100
                // A loaded debug run once took the second poll's handshake past the 10 s default.
                $0.handshakeTimeout = .seconds(120)
            }
        ) { bridge in
            try await bridge.record(5_000)
            let first = try await bridge.poll(closeAfterBytes: 38 * 1_000 + 7)
            #expect(!first.cleanClose)
            #expect(first.tupleCount == 1_000)
            // Batches flushed to the socket count as delivered even if the poller did not read them
            // (how many the socket buffers took before the hang-up depends on timing). Once the
            // server has settled the drain (deleted what it delivered, released its claim on the
            // rest), what is left is pending and unclaimed, and is what the next poll gets.
            var left = 0
            // Settling waits for the server's drain task: slow on a loaded debug build.
            try await eventually(timeout: .seconds(60)) {
                let total = try await bridge.store.pendingCount()
                let unclaimed = try await bridge.store.pendingEntries(
                    tenant: UpstreamHarness.topic,
                    environment: .sandbox,
                    limit: 10_000
                ).count
                left = total
                return total <= 4_000 && unclaimed == total
            }
            let second = try await bridge.poll()
            #expect(second.cleanClose)
            let firstTokens = Set(first.tuples.map(\.deviceToken))
            #expect(second.tuples.allSatisfy { !firstTokens.contains($0.deviceToken) })
            #expect(second.tupleCount == left, "the rest, exactly")
            #expect(Set(second.tuples.map(\.deviceToken)).count == second.tupleCount)
            // The server deletes after the close: the poller may see the close first.
            try await eventually { try await bridge.store.pendingCount() == 0 }
        }
    }

    @Test("The 38-byte option: only 32-byte tokens are served", arguments: StoreKind.available)
    func only32ByteTokens(kind: StoreKind) async throws {
        try await withResource(try await Bridge.start(kind) { $0.drain.only32ByteTokens = true }) { bridge in
            try await bridge.record(3)
            try await bridge.record(2, first: 100, length: 64)
            let poll = try await bridge.poll()
            #expect(poll.tupleCount == 3)
            #expect(poll.tuples.allSatisfy { $0.deviceToken.readableBytes == 32 })
            try await eventually { try await bridge.store.pendingCount() == 2 }
        }
    }

    @Test(
        "A naive reader (one 38-byte recv per tuple, as Go's libraries read) gets 1,000 tuples whole: no tuple straddles two TLS records",
        .enabled(if: LegacyHabits.available),
        arguments: StoreKind.available
    )
    func naiveReader(kind: StoreKind) async throws {
        try await withResource(try await Bridge.start(kind)) { bridge in
            try await bridge.record(1000)
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "naive-feedback-\(UUID().uuidString)"
            ).path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let identity = try bridge.upstream.pki.providerIdentity(bundleID: UpstreamHarness.topic)
            let files = try LegacyHabits.Files(
                identity: identity,
                pki: bridge.upstream.pki,
                in: directory,
                name: "poller"
            )
            let read = try await LegacyHabits.python(
                "naive-feedback",
                ["127.0.0.1", "\(bridge.feedback.localAddress.port!)", files.certificate, files.privateKey, files.ca],
                as: NaiveFeedbackRead.self
            )
            #expect(read.short_reads == 0)
            #expect(read.tuples == 1000)
            #expect(read.distinct == 1000)
            try await eventually { try await bridge.store.pendingCount() == 0 }
        }
    }

    struct GoFeedbackRead: Decodable {
        var tuples: Int
        var dropped_with_error: Int
        var short_reads: Int
        var tokens: [String]
        var error: String
    }

    @Test(
        "A Go reader (Read(buf[:38]) until an error, dropping bytes that come with one, as both Go libraries read) gets every tuple, reading at once, 300 ms and 1 s late, over 10 polls each; what it got is deleted",
        .enabled(if: LegacyHabits.goAvailable || interopRequired),
        arguments: [StoreKind.sqlite]
    )
    func goReaderKeepsTheLastTuple(kind: StoreKind) async throws {
        try await withResource(try await Bridge.start(kind)) { bridge in
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "go-feedback-\(UUID().uuidString)"
            ).path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            // One tenant per delay, so that the three readers poll side by side.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, delay) in [0, 300, 1000].enumerated() {
                    let tenant = "com.example.go\(index)"
                    let files = try LegacyHabits.Files(
                        identity: try bridge.upstream.pki.providerIdentity(bundleID: tenant),
                        pki: bridge.upstream.pki,
                        in: directory,
                        name: "poller\(index)"
                    )
                    group.addTask {
                        for poll in 0..<10 {
                            let first = index * 1000 + poll * 10
                            try await bridge.record(3, tenant: tenant, first: first)
                            let read = try await LegacyHabits.go(
                                "feedback",
                                [
                                    "127.0.0.1", "\(bridge.feedback.localAddress.port!)", files.certificate,
                                    files.privateKey, files.ca, "\(delay)",
                                ],
                                as: GoFeedbackRead.self
                            )
                            let expected = (first..<first + 3).map { FrameBuilder.token($0).hexDump(format: .compact) }
                            #expect(
                                read.tokens.sorted() == expected && read.dropped_with_error == 0
                                    && read.short_reads == 0,
                                "reading \(delay) ms late, poll \(poll): \(read.tokens) for \(expected), \(read.dropped_with_error) read dropped with an error (\(read.error))"
                            )
                            try await eventually {
                                try await bridge.store.pendingEntries(tenant: tenant, environment: .sandbox, limit: 10)
                                    .isEmpty
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
    }

    @Test("An unknown client certificate gets nothing", arguments: [StoreKind.sqlite])
    func unknownCertificate(kind: StoreKind) async throws {
        try await withResource(try await Bridge.start(kind)) { bridge in
            try await bridge.record(3)
            let stranger = try DevelopmentCA(name: "another CA")
            let poll = try? await FeedbackPoller.poll(
                bridge.feedback.localAddress,
                identity: try stranger.providerIdentity(bundleID: UpstreamHarness.topic),
                trusting: bridge.upstream.pki.caCertificate
            )
            #expect((poll?.tupleCount ?? 0) == 0)
            #expect(try await bridge.store.pendingCount() == 3)
        }
    }
}

import BridgeCore
import BridgeServer
import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import NIOCore
import NIOPosix
import Testing

/// docs/protocol.md#end-of-input over real TLS: the end of a provider's input is not loss. Providers that write
/// a batch and close at once (PHP's `fwrite` then `fclose`) have every complete frame forwarded,
/// however long the in-flight window makes it wait; only a frame cut off by the close is not.
@Suite("End of input")
struct EndOfInputTests {
    /// An upstream of about 1,000 notifications/s with a window of 64: 64 answers every ~60 ms.
    static func slowUpstream() async throws -> GatewayHarness {
        try await GatewayHarness.start(
            script: { _, _ in .init(.accepted, after: .milliseconds(60)) },
            configure: { $0.session.maximumInFlight = 64 }
        )
    }

    /// Each identifier in the ledger, how many times.
    static func deliveries(_ harness: GatewayHarness) -> [UInt32: Int] {
        var seen: [UInt32: Int] = [:]
        for notification in harness.forwarder.ledger {
            seen[notification.frame.identifier.rawValue, default: 0] += 1
        }
        return seen
    }

    @Test("Write 5,000 frames and close at once (close_notify, then FIN): all 5,000 are delivered once")
    func fireAndClose() async throws {
        try await withResource(try await Self.slowUpstream()) { harness in
            let client = try await harness.connect()
            try await client.send(ResendTests.frames(1...5_000))
            await client.close()
            try await harness.forwarder.waitForLedgerCount(5_000, timeout: .seconds(120), on: client.channel.eventLoop)
            let seen = Self.deliveries(harness)
            #expect(seen.count == 5_000)
            #expect(seen.values.allSatisfy { $0 == 1 })
        }
    }

    @Test(
        "A provider that half-closes is answered after its last notification, then the bridge closes",
        arguments: [true, false]
    )
    func halfClose(closeNotify: Bool) async throws {
        try await withResource(try await Self.slowUpstream()) { harness in
            let client = try await harness.connect()
            try await client.send(ResendTests.frames(1...1_000))
            try await client.closeOutput(closeNotify: closeNotify)
            // The bridge closes only once every notification has an outcome: by then all arrived.
            let received = try await client.bytesUntilClose(timeout: .seconds(120))
            #expect(received.readableBytes == 0, "no error-response")
            let seen = Self.deliveries(harness)
            #expect(seen.count == 1_000)
            #expect(seen.values.allSatisfy { $0 == 1 })
        }
    }

    @Test(
        "A close without close_notify in the middle of a frame: every complete frame is delivered, the cut one is not"
    )
    func cutMidFrame() async throws {
        try await withResource(try await Self.slowUpstream()) { harness in
            let client = try await harness.connect()
            var bytes = ResendTests.frames(1...2_000)
            let cut = ResendTests.frames(2_001...2_001)
            bytes.writeImmutableBuffer(cut.getSlice(at: cut.readerIndex, length: cut.readableBytes / 2)!)
            try await client.send(bytes)
            try await client.closeOutput(closeNotify: false)
            let received = try await client.bytesUntilClose(timeout: .seconds(120))
            #expect(received.readableBytes == 0)
            let seen = Self.deliveries(harness)
            #expect(seen.count == 2_000)
            #expect(seen[2_001] == nil)
            #expect(seen.values.allSatisfy { $0 == 1 })
        }
    }

    @Test("A failure decided after a half-close still reaches the provider, and nothing after it is forwarded")
    func failureAfterHalfClose() async throws {
        // Notification 300's answer is held until the provider has half-closed.
        let halfClosed = MultiThreadedEventLoopGroup.singleton.any().makePromise(of: Void.self)
        defer { halfClosed.succeed() }  // never leaked, whatever fails (a second success is ignored)
        try await withResource(
            try await GatewayHarness.start(script: { notification, _ in
                notification.frame.identifier.rawValue == 300
                    ? .init(.rejected(.invalidToken), when: halfClosed.futureResult)
                    : .init(.accepted, after: .milliseconds(20))
            }) {
                $0.session.maximumInFlight = 32
            }
        ) { harness in
            let client = try await harness.connect()
            try await client.send(ResendTests.frames(1...1_000))
            try await client.closeOutput()
            halfClosed.succeed()
            var received = try await client.bytesUntilClose(timeout: .seconds(120))
            #expect(
                received.readErrorResponse()
                    == ErrorResponsePacket(status: .invalidToken, identifier: .init(rawValue: 300))
            )
            let forwarded = Set(harness.forwarder.ledger.map(\.frame.identifier.rawValue))
            #expect(forwarded.isSuperset(of: Set(1...300)))
            #expect(forwarded.allSatisfy { $0 < 300 + 32 }, "nothing read after the failure was decided went upstream")
        }
    }
}

/// Sockets that never finish a handshake are bounded apart from providers.
@Suite("Handshake admission")
struct HandshakeAdmissionTests {
    /// A TCP connection that sends nothing: a stalled handshake.
    static func stalledSocket(to address: SocketAddress, from source: String) async throws -> any Channel {
        try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(to: try SocketAddress(ipAddress: source, port: 0))
            .connect(to: address)
            .get()
    }

    @Test(
        "A flood of stalled handshakes from one address is refused at accept; another address still connects and delivers"
    )
    func floodFromOneAddress() async throws {
        try await withResource(
            try await GatewayHarness.start(configure: {
                $0.maximumHandshakesPerAddress = 8
                $0.maximumHandshakes = 100
                $0.handshakeTimeout = .seconds(60)
            })
        ) { harness in
            var stalled: [any Channel] = []
            for _ in 0..<8 {
                stalled.append(try await Self.stalledSocket(to: harness.server.localAddress, from: "127.0.0.2"))
            }
            try await eventually { harness.server.handshakingCount == 8 }
            // The ninth from the same address is closed as soon as it is accepted.
            let refused = try await Self.stalledSocket(to: harness.server.localAddress, from: "127.0.0.2")
            try await refused.closeFuture.get()
            #expect(stalled.allSatisfy { $0.isActive })
            #expect(harness.server.handshakingCount == 8)

            // A provider from another address is admitted and delivers.
            let provider = try await harness.connect()
            try await provider.send(ResendTests.frames(1...10))
            try await harness.forwarder.waitForLedgerCount(10, on: provider.channel.eventLoop)
            #expect(provider.isActive)
            #expect(harness.server.handshakingCount == 8, "a completed handshake no longer counts")
            await provider.close()
            for channel in stalled { try? await channel.close() }
        }
    }

    @Test("The global bound on handshakes in progress refuses further sockets from any address")
    func globalBound() async throws {
        try await withResource(
            try await GatewayHarness.start(configure: {
                $0.maximumHandshakesPerAddress = 100
                $0.maximumHandshakes = 4
                $0.handshakeTimeout = .seconds(60)
            })
        ) { harness in
            var stalled: [any Channel] = []
            for source in ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"] {
                stalled.append(try await Self.stalledSocket(to: harness.server.localAddress, from: source))
            }
            try await eventually { harness.server.handshakingCount == 4 }
            let refused = try await Self.stalledSocket(to: harness.server.localAddress, from: "127.0.0.6")
            try await refused.closeFuture.get()
            #expect(harness.server.handshakingCount == 4)
            // Once one stalled socket goes away, a provider gets its place.
            try await stalled.removeFirst().close()
            try await eventually { harness.server.handshakingCount == 3 }
            let provider = try await harness.connect()
            try await provider.send(ResendTests.frames(1...3))
            try await harness.forwarder.waitForLedgerCount(3, on: provider.channel.eventLoop)
            await provider.close()
            for channel in stalled { try? await channel.close() }
        }
    }
}

import BridgeCore
import BridgeServer
import BridgeTestSupport
import LegacyClient
import LegacyProtocol
import MetricsTestKit
import NIOCore
import Synchronization
import Testing

@Suite("Shutdown and backpressure")
struct ShutdownAndBackpressureTests {
    @Test("Shutdown: status 10 names the last notification whose predecessors completed")
    func gracefulShutdown() async throws {
        try await withResource(
            try await GatewayHarness.start(script: { _, _ in .init(.accepted, after: .milliseconds(20)) }) {
                $0.shutdownGracePeriod = .seconds(5)
            }
        ) { harness in
            let client = try await harness.connect()
            try await client.send(ResendTests.frames(1...50))
            try await harness.forwarder.waitForLedgerCount(50, on: client.channel.eventLoop)
            await harness.server.shutdownGracefully()
            let received = try await client.bytesUntilClose()
            var reader = received
            #expect(
                reader.readErrorResponse() == ErrorResponsePacket(status: .shutdown, identifier: .init(rawValue: 50))
            )
            #expect(reader.readableBytes == 0)
            // The named notification is remembered: a client that resends it does not duplicate it.
            #expect(harness.resendRecords.count == 1)
        }
    }

    @Test("Shutdown after the grace period: in-flight notifications become resend records")
    func shutdownGraceExpires() async throws {
        try await withResource(
            try await GatewayHarness.start(script: { notification, _ in
                // Long enough that 4...6 are still in flight when the 200 ms grace ends, however late a
                // loaded debug build runs that timer.
                notification.frame.identifier.rawValue <= 3 ? .init(.accepted) : .init(.accepted, after: .seconds(20))
            }) {
                $0.shutdownGracePeriod = .milliseconds(200)
            }
        ) { harness in
            let client = try await harness.connect()
            try await client.send(ResendTests.frames(1...6))
            try await harness.forwarder.waitForLedgerCount(6, on: client.channel.eventLoop)
            await harness.server.shutdownGracefully()
            let received = try await client.bytesUntilClose()
            var reader = received
            #expect(
                reader.readErrorResponse() == ErrorResponsePacket(status: .shutdown, identifier: .init(rawValue: 3))
            )
            // 3 (named) and 4...6 (in flight) are remembered.
            #expect(harness.resendRecords.count == 4)
        }
    }

    @Test("Shutdown whose resend records are not stored by its bound: the farewell goes out then, not a bare close")
    func shutdownBoundBeforeRecordsStored() async throws {
        let stalled = StalledResendRecordWrites()
        let metrics = TestMetrics()
        try await withResource(
            try await GatewayHarness.start(
                resendStore: { stalled.wrapping($0) },
                script: { notification, _ in
                    notification.frame.identifier.rawValue <= 3
                        ? .init(.accepted) : .init(.accepted, after: .seconds(20))
                },
                metrics: GatewayMetrics(factory: metrics)
            ) {
                $0.shutdownGracePeriod = .milliseconds(200)
            }
        ) { harness in
            defer { stalled.release() }
            let client = try await harness.connect()
            try await client.send(ResendTests.frames(1...6))
            try await harness.forwarder.waitForLedgerCount(6, on: client.channel.eventLoop)
            // The records of 3...6 are never stored before the bound (grace, drain, margin).
            await harness.server.shutdownGracefully()
            var received = try await client.bytesUntilClose()
            #expect(
                received.readErrorResponse() == ErrorResponsePacket(status: .shutdown, identifier: .init(rawValue: 3))
            )
            #expect(received.readableBytes == 0)
            #expect(stalled.waiting == 1, "the farewell's records were still being stored")
            #expect(metrics.counterTotal(label: "apns_bridge_shutdown_farewells_before_records_total") == 1)
            #expect(harness.resendRecords.count == 4)
        }
    }

    @Test("A slow upstream stops reading at the in-flight bound, and reading resumes when it drains")
    func backpressure() async throws {
        let release = ReleaseGate()
        try await withResource(
            try await GatewayHarness.start(script: { _, _ in
                // Held long enough that a loaded machine cannot finish them before the check below.
                .init(.accepted, after: release.isOpen ? .zero : .seconds(5))
            }) {
                $0.session.maximumInFlight = 16
            }
        ) { harness in
            let client = try await harness.connect()
            try await client.send(ResendTests.frames(1...400))
            try await harness.forwarder.waitForLedgerCount(16, on: client.channel.eventLoop)
            // While the first 16 are outstanding nothing more is forwarded.
            try await Task.sleep(for: .milliseconds(300))
            #expect(harness.forwarder.ledger.count == 16)
            release.open()
            try await harness.forwarder.waitForLedgerCount(400, timeout: .seconds(20), on: client.channel.eventLoop)
            #expect(Set(harness.forwarder.ledger.map(\.frame.identifier.rawValue)) == Set(1...400))
            #expect(client.isActive)
            await client.close()
        }
    }

    @Test("Connections beyond the cap are closed at once")
    func connectionCap() async throws {
        try await withResource(try await GatewayHarness.start(configure: { $0.maximumConnections = 2 })) { harness in
            let a = try await harness.connect()
            let b = try await harness.connect()
            try await eventually { harness.server.connectionCount == 2 }
            let c = try await harness.connect()
            #expect(try await c.bytesUntilClose().readableBytes == 0)
            #expect(a.isActive && b.isActive)
            await a.close()
            await b.close()
        }
    }

    @Test("A connection that never finishes its handshake is closed after the timeout")
    func handshakeTimeout() async throws {
        try await withResource(try await GatewayHarness.start(configure: { $0.handshakeTimeout = .milliseconds(200) }))
        { harness in
            let closed = try await RawTCPClient.connectAndWaitForClose(
                to: harness.server.localAddress,
                timeout: .seconds(5)
            )
            #expect(closed)
        }
    }
}

/// A flag the upstream script reads; tests open it to let a slow upstream go fast.
final class ReleaseGate: Sendable {
    private let state = Mutex(false)
    var isOpen: Bool { self.state.withLock { $0 } }
    func open() { self.state.withLock { $0 = true } }
}

/// A resend store whose record writes (`remember`) hold their answer until ``release()``: the
/// records are in the wrapped store at once, the caller only hears so later.
final class StalledResendRecordWrites: Sendable {
    private let held = Mutex<[EventLoopPromise<Void>]>([])

    var waiting: Int { self.held.withLock { $0.count } }

    func wrapping(_ store: InMemoryResendRecordStore) -> any ResendRecordStore {
        Store(wrapped: store, held: self)
    }

    func release() {
        let promises = self.held.withLock { held in
            let promises = held
            held = []
            return promises
        }
        for promise in promises {
            promise.succeed()
        }
    }

    private struct Store: ResendRecordStore {
        let wrapped: InMemoryResendRecordStore
        let held: StalledResendRecordWrites

        func mayHoldLiveRecords(tenant: String) -> Bool { self.wrapped.mayHoldLiveRecords(tenant: tenant) }

        func refreshLiveRecords(tenant: String, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
            self.wrapped.refreshLiveRecords(tenant: tenant, on: eventLoop)
        }

        func remember(_ records: [ResendRecord], on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
            let promise = eventLoop.makePromise(of: Void.self)
            self.wrapped.remember(records, on: eventLoop).whenComplete { _ in
                self.held.held.withLock { $0.append(promise) }
            }
            return promise.futureResult
        }

        func resolve(
            _ key: ResendRecordKey,
            outcome: NotificationOutcome,
            on eventLoop: any EventLoop
        ) -> EventLoopFuture<Void> {
            self.wrapped.resolve(key, outcome: outcome, on: eventLoop)
        }

        func claim(_ key: ResendRecordKey, on eventLoop: any EventLoop) -> EventLoopFuture<ResendClaim> {
            self.wrapped.claim(key, on: eventLoop)
        }
    }
}

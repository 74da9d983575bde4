import BridgeCore
import BridgeServer
import BridgeTestSupport
import LegacyClient
import LegacyProtocol
import NIOCore
import NIOSSL
import Testing

@Suite("TLS policy and timeouts")
struct TLSPolicyTests {
    static let frame = FrameBuilder.frame(
        .itemized,
        identifier: 1,
        token: FrameBuilder.token(1),
        payload: FrameBuilder.payload()
    )

    @Test("TLS 1.3 is refused by default: a client that insists on it gets no service")
    func tls13RefusedByDefault() async throws {
        try await withResource(try await GatewayHarness.start()) { harness in
            let client = try await harness.connect(minimumTLSVersion: .tlsv13, maximumTLSVersion: .tlsv13)
            try? await client.send(Self.frame)
            #expect(try await client.bytesUntilClose().readableBytes == 0)
            #expect(harness.forwarder.ledger.isEmpty)
        }
    }

    @Test("TLS 1.3 works when allowed")
    func tls13WhenAllowed() async throws {
        try await withResource(try await GatewayHarness.start(configure: { $0.tls.allowTLS13 = true })) { harness in
            let client = try await harness.connect(minimumTLSVersion: .tlsv13, maximumTLSVersion: .tlsv13)
            try await client.send(Self.frame)
            try await harness.forwarder.waitForLedgerCount(1, on: client.channel.eventLoop)
            await client.close()
        }
    }

    @Test("A client limited to TLS 1.1 is refused unless legacy TLS is allowed", arguments: [false, true])
    func legacyTLS(allowed: Bool) async throws {
        try await withResource(try await GatewayHarness.start(configure: { $0.tls.allowLegacyTLS = allowed })) {
            harness in
            let client = try await harness.connect(minimumTLSVersion: .tlsv11, maximumTLSVersion: .tlsv11)
            try? await client.send(Self.frame)
            if allowed {
                try await harness.forwarder.waitForLedgerCount(1, on: client.channel.eventLoop)
                #expect(client.isActive)
                await client.close()
            } else {
                #expect(try await client.bytesUntilClose().readableBytes == 0)
                #expect(harness.forwarder.ledger.isEmpty)
            }
        }
    }

    @Test("An idle connection with nothing in flight is closed after the idle timeout, without an error-response")
    func idleTimeout() async throws {
        try await withResource(try await GatewayHarness.start(configure: { $0.idleTimeout = .seconds(2) })) { harness in
            // Nothing sent: a frame sent after the handshake could reach a loaded bridge after
            // the 2 s, and the test would then be about the machine's speed.
            let client = try await harness.connect()
            #expect(try await client.bytesUntilClose().readableBytes == 0)
            #expect(harness.forwarder.ledger.isEmpty)
        }
    }
}

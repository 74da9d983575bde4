import BridgeCore
import BridgeServer
import BridgeTestSupport
import DevelopmentPKI
import LegacyClient
import LegacyProtocol
import Logging
import NIOCore
import NIOPosix
import Testing

/// The gateway behind a load balancer that writes PROXY protocol headers
/// (docs/scaling.md#proxy-protocol), over real TLS on loopback.
@Suite("PROXY protocol on the legacy listeners")
struct ProxyProtocolTests {
    static let frame = FrameBuilder.frame(
        .itemized,
        identifier: 1,
        token: FrameBuilder.token(1),
        payload: FrameBuilder.payload()
    )

    static func version1(client: String, port: Int = 5555) -> ByteBuffer {
        ByteBuffer(string: "PROXY TCP4 \(client) 127.0.0.1 \(port) 2195\r\n")
    }

    static func version2(client: [UInt8], port: UInt16 = 5555) -> ByteBuffer {
        var bytes = ByteBuffer(bytes: [
            0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A, 0x21, 0x11, 0x00, 12,
        ])
        bytes.writeBytes(client)
        bytes.writeBytes([127, 0, 0, 1])
        bytes.writeInteger(port)
        bytes.writeInteger(UInt16(2195))
        return bytes
    }

    static func start(
        loadBalancers: [String],
        log: CapturedLog? = nil,
        configure: @escaping (inout GatewayConfiguration) -> Void = { _ in }
    ) async throws -> GatewayHarness {
        try await GatewayHarness.start(
            log: log,
            configure: {
                $0.proxyProtocol = ProxyProtocolPolicy(loadBalancers: loadBalancers.map { IPNetwork($0)! })
                configure(&$0)
            }
        )
    }

    /// A provider connection through the "load balancer" (this test, from `localAddress`),
    /// sending `preamble` before its TLS handshake.
    static func connect(
        _ harness: GatewayHarness,
        preamble: ByteBuffer?,
        from localAddress: String = "127.0.0.1"
    ) async throws -> LegacyConnection {
        try await LegacyConnection.connect(
            to: harness.server.localAddress,
            identity: try harness.pki.providerIdentity(bundleID: "com.example.app"),
            trusting: harness.pki.caCertificate,
            from: try SocketAddress(ipAddress: localAddress, port: 0),
            preamble: preamble
        )
    }

    /// Whether the gateway served a notification on a connection (`false`: the connection was
    /// refused, at its handshake or before).
    static func served(
        _ harness: GatewayHarness,
        preamble: ByteBuffer?,
        from localAddress: String = "127.0.0.1"
    ) async throws -> Bool {
        let before = harness.forwarder.ledger.count
        guard let client = try? await Self.connect(harness, preamble: preamble, from: localAddress) else {
            return false
        }
        guard (try? await client.send(Self.frame)) != nil else {
            await client.close()
            return false
        }
        // Served: the frame reaches the upstream and the connection stays open; refused: the
        // connection closes without a byte, and nothing reached the upstream.
        let outcome = try await eventually("the frame to arrive or the connection to close", timeout: .seconds(30)) {
            () -> Bool? in
            if harness.forwarder.ledger.count > before { return true }
            if !client.isActive { return false }
            return nil
        }
        _ = await client.finish()
        return outcome
    }

    @Test("From a configured load balancer, a version 1 or 2 header comes first; the provider behind it is served")
    func served() async throws {
        try await withResource(try await Self.start(loadBalancers: ["127.0.0.1"])) { harness throws in
            #expect(try await Self.served(harness, preamble: Self.version1(client: "203.0.113.7")))
            #expect(try await Self.served(harness, preamble: Self.version2(client: [203, 0, 113, 8])))
        }
    }

    @Test("From a configured load balancer, a connection without a header is refused before TLS")
    func headerRequired() async throws {
        try await withResource(try await Self.start(loadBalancers: ["127.0.0.0/8"])) { harness throws in
            #expect(try await !Self.served(harness, preamble: nil))
            #expect(try await !Self.served(harness, preamble: ByteBuffer(string: "PROXY TCP4 nonsense\r\n")))
            #expect(harness.forwarder.ledger.isEmpty)
        }
    }

    @Test(
        "From any other peer, bytes are TLS from the first: a PROXY header is refused as one, naming proxyProtocol.loadBalancers; nobody else can claim an address"
    )
    func onlyFromLoadBalancers() async throws {
        let log = CapturedLog()
        try await withResource(try await Self.start(loadBalancers: ["127.0.0.2"], log: log)) { harness throws in
            #expect(try await !Self.served(harness, preamble: Self.version1(client: "203.0.113.7"), from: "127.0.0.1"))
            #expect(
                try await !Self.served(harness, preamble: Self.version2(client: [203, 0, 113, 8]), from: "127.0.0.1")
            )
            let warnings = log.lines(at: .warning).map(\.message)
            #expect(
                warnings.contains {
                    $0.contains("not a listed load balancer") && $0.contains("proxyProtocol.loadBalancers")
                },
                "\(warnings)"
            )
            #expect(!warnings.contains { $0.contains("tls.allowLegacyTLS") }, "not taken for an old TLS version")
            #expect(try await Self.served(harness, preamble: nil, from: "127.0.0.1"))
            #expect(try await Self.served(harness, preamble: Self.version1(client: "203.0.113.7"), from: "127.0.0.2"))
        }
    }

    @Test(
        "From a load balancer, the header and the TLS handshake share one timeout from the accept: a late header buys no fresh one"
    )
    func oneHandshakeTimeout() async throws {
        let timeout = TimeAmount.seconds(10)
        try await withResource(
            try await Self.start(loadBalancers: ["127.0.0.1"]) { $0.handshakeTimeout = timeout }
        ) { harness throws in
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(to: harness.server.localAddress).get()
            // The header half-way through the timeout (a balancer or a client trickling it),
            // then no TLS at all.
            try await Task.sleep(for: .seconds(5))
            let written = ContinuousClock.now
            guard (try? await channel.writeAndFlush(Self.version1(client: "203.0.113.7")).get()) != nil else {
                // A machine so loaded that the sleep outlasted the timeout: the one timeout
                // closed the connection before the header, which is what is asserted below.
                return
            }
            try await channel.closeFuture.get()
            // With one timeout from the accept, the close comes the rest of it after the header
            // (about 5 s); with a fresh one it would come a whole timeout (10 s) after it. Measured
            // from the header, so a slow test task only shortens it.
            let closedAfterHeader = ContinuousClock.now - written
            #expect(
                closedAfterHeader < .nanoseconds(timeout.nanoseconds),
                "closed \(closedAfterHeader) after the header"
            )
        }
    }

    @Test("The per-address handshake bound counts the header's client, not the load balancer")
    func perAddressBound() async throws {
        try await withResource(
            try await Self.start(
                loadBalancers: ["127.0.0.1"],
                configure: {
                    $0.maximumHandshakesPerAddress = 1
                    $0.handshakeTimeout = .seconds(300)  // the stalled handshake outlasts the test
                }
            )
        ) { harness throws in
            // A client whose handshake stalls after its header...
            let stalled = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(
                to: harness.server.localAddress
            ).get()
            try await stalled.writeAndFlush(Self.version1(client: "203.0.113.7")).get()
            try await eventually("the stalled handshake to count against its client") {
                harness.server.handshakingCount(from: "203.0.113.7") == 1
            }
            #expect(
                harness.server.handshakingCount(from: "127.0.0.1") == 0,
                "the load balancer's own address counts nothing"
            )
            // ...holds that client's one slot,
            #expect(try await !Self.served(harness, preamble: Self.version1(client: "203.0.113.7")))
            // while another client behind the same load balancer is served.
            #expect(try await Self.served(harness, preamble: Self.version1(client: "203.0.113.9")))
            try await stalled.close().get()
        }
    }

    @Test("Load balancers are addresses or CIDR networks; an IPv4 network holds the IPv4-mapped form of its addresses")
    func networks() throws {
        func at(_ text: String) throws -> SocketAddress { try SocketAddress(ipAddress: text, port: 1) }
        let network = try #require(IPNetwork("10.1.0.0/16"))
        #expect(network.description == "10.1.0.0/16")
        let inside = try at("10.1.200.3")
        let outside = try at("10.2.0.1")
        let mapped = try at("::ffff:10.1.0.9")
        #expect(network.contains(inside) && !network.contains(outside) && network.contains(mapped))
        #expect(IPNetwork("10.1.2.3/16")?.description == "10.1.0.0/16", "host bits are cleared")
        let single = try #require(IPNetwork("::1"))
        let loopback6 = try at("::1")
        let loopback4 = try at("127.0.0.1")
        #expect(single.prefixLength == 128 && single.contains(loopback6) && !single.contains(loopback4))
        let unique = try at("fd12::1")
        #expect(IPNetwork("fd00::/8")?.contains(unique) == true)
        for bad in [
            "", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/-1", "10.0.0/8", "fd00::/129", "example.com", "10.0.0.0/8/1",
        ] {
            #expect(IPNetwork(bad) == nil, "\(bad)")
        }
        // Written as IPv4-mapped, a network is the IPv4 one: it holds IPv4 peers as well.
        let written = try #require(IPNetwork("::ffff:127.0.0.2/128"))
        #expect(written.description == "127.0.0.2/32")
        let peer4 = try at("127.0.0.2")
        let peerMapped = try at("::ffff:127.0.0.2")
        #expect(written.contains(peer4) && written.contains(peerMapped))
        #expect(IPNetwork("::ffff:10.0.0.0/104")?.description == "10.0.0.0/8")
        let policy = ProxyProtocolPolicy(loadBalancers: [network])
        #expect(policy.expectsHeader(from: inside) && !policy.expectsHeader(from: outside))
        #expect(!ProxyProtocolPolicy.off.expectsHeader(from: inside))
    }
}

import BridgeApp
import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import MockAPNs
import NIOCore
import NIOPosix
import Testing

/// docs/scaling.md's deployment with Debian's HAProxy itself: two `serve` processes on one
/// PostgreSQL behind docs/examples/haproxy.cfg with only its addresses changed, providers on
/// other loopback addresses reaching them only through HAProxy.
extension StoreProcessTests {
    /// The example file with its addresses pointed at the test's processes; each substitution
    /// must apply, so that the file under test is the example.
    static func haproxyConfiguration(gateway: Int, feedback: Int, bridges: [BridgeProcess]) throws -> String {
        let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("docs/examples/haproxy.cfg")
        var text = try String(contentsOf: example, encoding: .utf8)
        var replacements = [("bind :2195", "bind 127.0.0.1:\(gateway)"), ("bind :2196", "bind 127.0.0.1:\(feedback)")]
        for (index, bridge) in bridges.enumerated() {
            let host = "10.0.0.1\(index + 1)"
            replacements.append(
                (
                    "\(host):2195 send-proxy-v2 check port 9180",
                    "127.0.0.1:\(bridge.gatewayAddress.port!) send-proxy-v2 check port \(bridge.adminPort!)"
                )
            )
            replacements.append(
                (
                    "\(host):2196 send-proxy-v2 check port 9180",
                    "127.0.0.1:\(bridge.feedbackAddress.port!) send-proxy-v2 check port \(bridge.adminPort!)"
                )
            )
        }
        for (example, replacement) in replacements {
            #expect(text.contains(example), "docs/examples/haproxy.cfg no longer has \(example)")
            text = text.replacingOccurrences(of: example, with: replacement)
        }
        return text
    }

    static func freePort() async throws -> Int {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(
            host: "127.0.0.1",
            port: 0
        ).get()
        let port = channel.localAddress!.port!
        try await channel.close()
        return port
    }

    @Test(
        "Behind HAProxy with the example file: providers' own addresses reach each bridge, an error and its resend stay exactly once, a reconnect after kill -9 reaches the survivor at once",
        .enabled(if: TestDatabases.postgresURL != nil, "APNS_BRIDGE_TEST_POSTGRES_URL is not set; run scripts/test"),
        .enabled(if: interopRequired || executablePath("haproxy") != nil, "haproxy is not installed (Debian: haproxy)")
    )
    func behindHAProxy() async throws {
        let haproxy = try #require(executablePath("haproxy"), "install haproxy")
        let environment = try await BridgeProcess.Environment.make()
        let url = try await TestDatabases.postgresLocation()
        let variables = ["APNS_BRIDGE_PROXY_PROTOCOL_LOAD_BALANCERS": "127.0.0.1"]
        let first = try await BridgeProcess.start(environment, store: url, variables: variables, name: "first")
        let second = try await BridgeProcess.start(environment, store: url, variables: variables, name: "second")
        // HAProxy takes a server out at its first failed check after it starts, and back in only
        // after `rise 2` passing checks (4 s): a bridge whose upstream connection is still
        // opening when HAProxy starts is out of rotation, and with both out a provider's
        // connection is closed at once. Start HAProxy once both are ready, as docs/scaling.md says.
        for bridge in [first, second] {
            let admin = try #require(bridge.adminPort)
            try await eventually("the bridge on admin port \(admin) to be ready", timeout: .seconds(60)) {
                (try? await AdminProbe.status(host: "127.0.0.1", port: admin)) == 200
            }
        }
        // A port found free may be taken before HAProxy binds it (an outgoing connection of another
        // test gets it as its ephemeral port): then HAProxy exits "Address already in use" and is
        // started again on other ports.
        var started: (balancer: Process, gateway: SocketAddress, feedback: SocketAddress)?
        for attempt in 1...5 where started == nil {
            let gatewayPort = try await Self.freePort()
            let feedbackPort = try await Self.freePort()
            let configuration = "\(environment.directory)/haproxy.cfg"
            try Self.haproxyConfiguration(gateway: gatewayPort, feedback: feedbackPort, bridges: [first, second])
                .write(toFile: configuration, atomically: true, encoding: .utf8)
            let balancer = Process()
            balancer.executableURL = URL(fileURLWithPath: haproxy)
            balancer.arguments = ["-db", "-f", configuration]
            let balancerLog = "\(environment.directory)/haproxy-\(attempt).log"
            _ = FileManager.default.createFile(atPath: balancerLog, contents: nil)
            balancer.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: balancerLog))
            balancer.standardError = balancer.standardOutput
            try balancer.run()
            let gateway = try SocketAddress(ipAddress: "127.0.0.1", port: gatewayPort)
            let feedback = try SocketAddress(ipAddress: "127.0.0.1", port: feedbackPort)
            let listening = try await eventually("HAProxy to listen or exit", timeout: .seconds(30)) { () -> Bool? in
                if !balancer.isRunning {
                    let log = (try? String(contentsOfFile: balancerLog, encoding: .utf8)) ?? ""
                    guard log.contains("Address already in use"), attempt < 5 else {
                        throw BridgeProcess.BridgeProcessFailed(reason: "haproxy exited: \(log)")
                    }
                    return false
                }
                guard
                    let probe = try? await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(
                        to: gateway
                    ).get()
                else { return nil }
                try? await probe.close()
                return true
            }
            if listening { started = (balancer, gateway, feedback) }
        }
        let (balancer, gateway, feedback) = try #require(started)
        defer { if balancer.isRunning { balancer.terminate() } }
        let identity = try environment.provider()
        let ca = environment.pki.caCertificate
        func connect(from address: String) async throws -> LegacyConnection {
            try await LegacyConnection.connect(
                to: gateway,
                identity: identity,
                trusting: ca,
                from: try SocketAddress(ipAddress: address, port: 0)
            )
        }
        func acceptedCount(_ token: ByteBuffer) -> Int {
            let hex = token.hexDump(format: .compact)
            return environment.mock.ledger.accepted.filter { $0.token == hex }.count
        }

        // Four providers at once, two from 127.0.0.2 and two from 127.0.0.3: leastconn spreads
        // them over both bridges, and each bridge logs the providers' own addresses.
        var providers: [LegacyConnection] = []
        for address in ["127.0.0.2", "127.0.0.3", "127.0.0.2", "127.0.0.3"] {
            providers.append(try await connect(from: address))
        }
        for (index, provider) in providers.enumerated() {
            var frames = ByteBuffer()
            for seed in (index * 100)..<(index * 100 + 50) {
                frames.writeImmutableBuffer(
                    FrameBuilder.frame(
                        .itemized,
                        identifier: UInt32(seed),
                        token: FrameBuilder.token(seed),
                        payload: FrameBuilder.payload()
                    )
                )
            }
            try await provider.send(frames)
        }
        try await eventually("200 notifications upstream", timeout: .seconds(60)) {
            environment.mock.ledger.counters.accepted >= 200
        }
        for provider in providers {
            _ = await provider.finish()
        }
        // Which bridge each got is HAProxy's choice (on a loaded machine one may get all four);
        // every provider connection either logged names the provider, not HAProxy.
        let connected = (first.log + "\n" + second.log).split(separator: "\n").filter {
            $0.contains("provider connected")
        }
        #expect(connected.count >= 4, "\(connected.count) provider connections logged")
        // Addresses are written host:port.
        #expect(
            connected.allSatisfy { $0.contains("peer=127.0.0.2:") || $0.contains("peer=127.0.0.3:") },
            "\(connected.first ?? "")"
        )
        #expect(connected.allSatisfy { $0.contains("load_balancer=127.0.0.1:") })

        // A feedback entry is read once through HAProxy's feedback port.
        let gone = FrameBuilder.token(0x410)
        environment.mock.script.unregister(token: gone.hexDump(format: .compact), atMilliseconds: Self.unregisteredAt)
        let unregistering = try await connect(from: "127.0.0.2")
        try await unregistering.send(
            FrameBuilder.frame(.itemized, identifier: 1, token: gone, payload: FrameBuilder.payload())
        )
        try await eventually("the 410 to be stored", timeout: .seconds(60)) {
            Self.storedTokenIDs(in: first.log + second.log).contains(Self.tokenID(gone))
        }
        _ = await unregistering.finish()
        let poll = try await FeedbackPoller.poll(feedback, identity: identity, trusting: ca)
        #expect(poll.tuples.map(\.deviceToken) == [gone])
        #expect(try await FeedbackPoller.poll(feedback, identity: identity, trusting: ca).tupleCount == 0)

        // A bad token fails after the frames behind it were forwarded; the provider resends the
        // rest on a new connection, wherever HAProxy puts it: each reaches APNs once.
        let bad = FrameBuilder.token(0xBAD)
        environment.mock.script.rejectAsBadToken(bad.hexDump(format: .compact))
        environment.mock.script.delayResponses(by: .milliseconds(100))
        let failing = try await connect(from: "127.0.0.3")
        var batch = ByteBuffer()
        batch.writeImmutableBuffer(
            FrameBuilder.frame(.itemized, identifier: 1000, token: bad, payload: FrameBuilder.payload())
        )
        for seed in 1001...1010 {
            batch.writeImmutableBuffer(
                FrameBuilder.frame(
                    .itemized,
                    identifier: UInt32(seed),
                    token: FrameBuilder.token(seed),
                    payload: FrameBuilder.payload()
                )
            )
        }
        try await failing.send(batch)
        #expect(
            try await failing.bytesUntilClose(timeout: .seconds(30)) == ByteBuffer(bytes: [8, 8, 0, 0, 0x03, 0xE8])
        )
        environment.mock.script.delayResponses(by: .zero)
        let resending = try await connect(from: "127.0.0.3")
        var resent = ByteBuffer()
        for seed in 1001...1010 {
            resent.writeImmutableBuffer(
                FrameBuilder.frame(
                    .itemized,
                    identifier: UInt32(seed),
                    token: FrameBuilder.token(seed),
                    payload: FrameBuilder.payload()
                )
            )
        }
        try await resending.send(resent)
        try await eventually("the resent batch upstream", timeout: .seconds(60)) {
            acceptedCount(FrameBuilder.token(1010)) >= 1
        }
        _ = await resending.finish()
        for seed in 1001...1010 {
            #expect(
                acceptedCount(FrameBuilder.token(seed)) == 1,
                "notification \(seed) reached APNs \(acceptedCount(FrameBuilder.token(seed))) times"
            )
        }

        // kill -9 one bridge: before HAProxy's checks notice, its reconnects go to the dead one
        // first (it has the fewest connections); redispatch sends each to the survivor at once.
        await first.kill()
        for attempt in 0..<4 {
            let seed = 2000 + attempt
            let provider = try await connect(from: attempt % 2 == 0 ? "127.0.0.2" : "127.0.0.3")
            // A reconnect HAProxy sent to the dead bridge is closed under it: the send may fail.
            try? await provider.send(
                FrameBuilder.frame(
                    .itemized,
                    identifier: UInt32(seed),
                    token: FrameBuilder.token(seed),
                    payload: FrameBuilder.payload()
                )
            )
            let served = try await eventually("reconnect \(attempt) served or closed", timeout: .seconds(60)) {
                () -> Bool? in
                if acceptedCount(FrameBuilder.token(seed)) == 1 { return true }
                return provider.isActive ? nil : false
            }
            #expect(served, "reconnect \(attempt) after the kill was not served")
            _ = await provider.finish()
        }

        // A PROXY header from a peer that is not the load balancer claims nothing.
        let forged = try? await LegacyConnection.connect(
            to: second.gatewayAddress,
            identity: identity,
            trusting: ca,
            from: try SocketAddress(ipAddress: "127.0.0.2", port: 0),
            preamble: ByteBuffer(string: "PROXY TCP4 198.51.100.1 127.0.0.1 5555 2195\r\n")
        )
        if let forged {
            try? await forged.send(
                FrameBuilder.frame(
                    .itemized,
                    identifier: 3000,
                    token: FrameBuilder.token(3000),
                    payload: FrameBuilder.payload()
                )
            )
            #expect((try? await forged.bytesUntilClose(timeout: .seconds(30)))?.readableBytes == 0)
        }
        #expect(acceptedCount(FrameBuilder.token(3000)) == 0)
        #expect(!second.log.contains("198.51.100.1"))

        balancer.terminate()
        try await eventually("HAProxy to exit", timeout: .seconds(30)) { !balancer.isRunning }
        await second.terminate()

        // The migration view counts the providers' addresses, not the load balancer's one: the
        // survivor served 127.0.0.2 and .3 after the kill, and the feedback poller (on
        // 127.0.0.1) if HAProxy sent its poll there (the killed bridge's counts died with it).
        let report = try await MigrationReportTests.report(url, ["--format", "csv"])
        #expect(report.status == 0)
        let rows = report.output.split(separator: "\n").map {
            $0.split(separator: ",", omittingEmptySubsequences: false)
        }
        let column = try #require(rows.first?.firstIndex(of: "source_addresses"))
        let row = try #require(rows.first { $0.first.map(String.init) == UpstreamHarness.topic }, "\(report.output)")
        #expect(
            ["2", "3"].contains(row[column]),
            "distinct source addresses: \(row[column]); through HAProxy without the PROXY protocol, 1"
        )
        await environment.close()
    }
}

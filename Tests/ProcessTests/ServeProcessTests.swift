import BridgeCore
import BridgeTestSupport
import Crypto
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import MockAPNs
import NIOCore
import NIOPosix
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The checks on `apns-bridge serve` as operators run it (child processes): the
/// configuration file, SIGTERM under load, the admin port, and what the logs leave out.
@Suite("serve: configuration, shutdown, metrics, logs (child processes)", .serialized)
struct ServeProcessTests {
    /// A port free on 127.0.0.1 now, below the kernel's ephemeral range (which outgoing
    /// connections draw from): it stays free until the test binds it.
    static func freePortBelowEphemeralRange() async throws -> Int {
        let range = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8))?
            .split(whereSeparator: \.isWhitespace).compactMap { Int($0) }
        let ephemeralStart = range?.first ?? 32768
        for _ in 0..<100 {
            let candidate = Int.random(in: 10_000..<max(10_001, ephemeralStart))
            if let channel = try? await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(
                host: "127.0.0.1",
                port: candidate
            ).get() {
                try await channel.close()
                return candidate
            }
        }
        throw TimedOut(what: "a free port below \(ephemeralStart)")
    }

    /// A token that names its connection and identifier: 4 bytes connection, 4 bytes identifier.
    static func token(connection: Int, identifier: Int) -> ByteBuffer {
        var token = ByteBuffer()
        token.writeInteger(UInt32(connection))
        token.writeInteger(UInt32(identifier))
        token.writeBytes([UInt8](repeating: 0xAB, count: 24))
        return token
    }

    static func get(_ port: Int, _ path: String) async throws -> (status: Int, body: String) {
        let (data, response) = try await URLSession.shared.data(from: URL(string: "http://127.0.0.1:\(port)\(path)")!)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }

    @Test(
        "The configuration file's tenants: topic from the configuration or the certificate, environment from the certificate's marker"
    )
    func configuredTenants() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let directory = environment.directory
            // Production goes nowhere (a port nothing listens on): a notification reaches the mock
            // only if its tenant's environment resolved to sandbox.
            let config = """
                environment: production
                tls:
                  certificate: \(directory)/server.crt
                  privateKey: \(directory)/server.key
                  clientCA: [\(directory)/ca.pem]
                credentials: [main]
                credential:
                  main:
                    keyFile: \(directory)/AuthKey.p8
                    keyId: \(UpstreamHarness.keyID)
                    teamId: \(UpstreamHarness.teamID)
                tenants: [renamed, plain]
                tenant:
                  renamed:
                    uid: com.example.other-bundle
                    topic: \(UpstreamHarness.topic)
                  plain:
                    uid: \(UpstreamHarness.topic)
                upstream:
                  sandbox: 127.0.0.1:\(environment.mock.port)
                  production: 127.0.0.1:9
                  ca: \(directory)/ca.pem
                  serverName: localhost
                gateway: {listen: "127.0.0.1:0"}
                feedback: {listen: "127.0.0.1:0"}
                admin: {listen: "127.0.0.1:0"}
                """
            try config.write(toFile: directory + "/apns-bridge.yaml", atomically: true, encoding: .utf8)
            try await withResource(
                try await BridgeProcess.start(
                    environment,
                    store: "sqlite:\(directory)/store.sqlite",
                    arguments: ["serve", "--config", directory + "/apns-bridge.yaml"]
                )
            ) { bridge in
                let pki = environment.pki

                for (index, identity) in [
                    try pki.providerIdentity(bundleID: "com.example.other-bundle", sandboxMarker: true),
                    try pki.providerIdentity(bundleID: UpstreamHarness.topic, sandboxMarker: true),
                ].enumerated() {
                    let client = try await LegacyConnection.connect(
                        to: bridge.gatewayAddress,
                        identity: identity,
                        trusting: pki.caCertificate
                    )
                    try await client.send(
                        FrameBuilder.frame(
                            .itemized,
                            identifier: UInt32(index + 1),
                            token: Self.token(connection: index, identifier: 1),
                            payload: FrameBuilder.payload()
                        )
                    )
                    #expect(await environment.mock.ledger.waitForAccepted(index + 1, timeout: .seconds(20)))
                    await client.close()
                }
                #expect(environment.mock.ledger.records.map(\.topic) == [UpstreamHarness.topic, UpstreamHarness.topic])

                // Not a configured tenant: refused during the handshake.
                let stranger = try await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try pki.providerIdentity(bundleID: "com.example.stranger", sandboxMarker: true),
                    trusting: pki.caCertificate
                )
                try? await stranger.send(
                    FrameBuilder.frame(
                        .itemized,
                        identifier: 9,
                        token: Self.token(connection: 9, identifier: 9),
                        payload: FrameBuilder.payload()
                    )
                )
                #expect(try await stranger.bytesUntilClose().readableBytes == 0)
                #expect(environment.mock.ledger.records.count == 2)
                #expect(bridge.log.contains("refusing a client certificate during the TLS handshake"))
            }
        }
    }

    @Test(
        "SIGTERM under load: every provider gets 08 0A id, everything up to id reached the upstream once, the process exits in time"
    )
    func sigtermUnderLoad() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            environment.mock.script.delayResponses(by: .milliseconds(20))
            // An attempt's deadline (10 s by default) is retried, and an upstream that answered late
            // then sees it twice: on a loaded machine (a debug build, every other test running)
            // thousands of streams can stay open that long. This test is about shutdown, so the
            // deadline is longer than the test. So is the TLS handshake's timeout: such a machine
            // has taken longer than its 10 s to finish one of 16 handshakes made at once.
            let bridge = try await BridgeProcess.start(
                environment,
                store: "sqlite:\(environment.directory)/store.sqlite",
                variables: [
                    "APNS_BRIDGE_GATEWAY_HANDSHAKE_TIMEOUT_SECONDS": "60",
                    "APNS_BRIDGE_UPSTREAM_REQUEST_TIMEOUT_SECONDS": "60",
                    "APNS_BRIDGE_UPSTREAM_RETRY_BUDGET_SECONDS": "120",
                ]
            )
            let identity = try environment.provider()
            let connections = 16
            var clients: [LegacyConnection] = []
            for _ in 0..<connections {
                clients.append(
                    try await LegacyConnection.connect(
                        to: bridge.gatewayAddress,
                        identity: identity,
                        trusting: environment.pki.caCertificate
                    )
                )
            }
            // Each connection sends batches until its connection stops taking them.
            let senders = clients.enumerated().map { index, client in
                Task {
                    var identifier = 1
                    while !Task.isCancelled, identifier <= 5000 {
                        var frames = ByteBuffer()
                        for _ in 0..<25 {
                            frames.writeImmutableBuffer(
                                FrameBuilder.frame(
                                    .itemized,
                                    identifier: UInt32(identifier),
                                    token: Self.token(connection: index, identifier: identifier),
                                    payload: FrameBuilder.payload()
                                )
                            )
                            identifier += 1
                        }
                        do { try await client.send(frames) } catch { break }
                        try? await Task.sleep(for: .milliseconds(5))
                    }
                }
            }
            #expect(await environment.mock.ledger.waitForAccepted(connections * 50, timeout: .seconds(30)))
            // Every connection has had a notification delivered before the signal, so that each
            // farewell names one (a connection whose sender had not run yet would rightly get id 0).
            let prefixes = (0..<connections).map {
                Self.token(connection: $0, identifier: 0).getSlice(at: 0, length: 4)!.hexDump(format: .compact)
            }
            // Stops at the first record of the last connection to be seen: the check runs every 5 ms
            // while tens of thousands of records pile up.
            let everyConnectionDelivered = await environment.mock.ledger.waitForRecords(timeout: .seconds(30)) {
                records in
                var missing = Set(prefixes)
                for record in records where record.wasAccepted {
                    missing.remove(String(record.token.prefix(8)))
                    if missing.isEmpty { return true }
                }
                return false
            }
            #expect(everyConnectionDelivered)
            let signalled = ContinuousClock.now
            kill(bridge.process.processIdentifier, SIGTERM)
            var farewells: [Int: UInt32] = [:]
            for (index, client) in clients.enumerated() {
                var bytes = try await client.bytesUntilClose(timeout: .seconds(30))
                #expect(bytes.readableBytes == ErrorResponsePacket.length, "connection \(index)")
                if let packet = bytes.readErrorResponse() {
                    #expect(packet.status == .shutdown)
                    farewells[index] = packet.identifier.rawValue
                }
            }
            for sender in senders { sender.cancel() }
            await bridge.terminate()  // waits for the exit
            let took = ContinuousClock.now - signalled
            #expect(!bridge.process.isRunning)
            #expect(bridge.process.terminationStatus == 0)
            // Grace 10 s, then the drain; the bound is loose for a loaded machine and still catches
            // a process that does not exit.
            #expect(took < .seconds(40), "grace 10 s + drain; took \(took)")

            // Per connection: every notification up to the farewell's id reached the upstream once.
            var arrivals: [String: Int] = [:]
            for record in environment.mock.ledger.records {
                arrivals[record.token, default: 0] += 1
            }
            #expect(farewells.count == connections)
            for (index, last) in farewells {
                #expect(last > 0, "connection \(index)")
                guard last > 0 else { continue }
                for identifier in 1...Int(last) {
                    let token = Self.token(connection: index, identifier: identifier).hexDump(format: .compact)
                    #expect(arrivals[token] == 1, "connection \(index), identifier \(identifier) of \(last)")
                }
            }
            #expect(arrivals.values.allSatisfy { $0 == 1 })
        }
    }

    @Test(
        "/readyz is 503 while the upstream is unreachable and 200 after; /metrics is Prometheus text whose counters move"
    )
    func adminPort() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            // A port with nothing behind it yet, from below the ephemeral range, so that no
            // outgoing connection of another test takes it before the mock binds it.
            let upstreamPort = try await Self.freePortBelowEphemeralRange()
            var arguments = environment.arguments
            arguments[arguments.firstIndex(of: "127.0.0.1:\(environment.mock.port)")!] = "127.0.0.1:\(upstreamPort)"
            try await withResource(
                try await BridgeProcess.start(
                    environment,
                    store: "sqlite:\(environment.directory)/store.sqlite",
                    arguments: arguments
                )
            ) { bridge in
                let admin = try #require(bridge.adminPort)

                #expect(try await Self.get(admin, "/healthz").status == 200)
                #expect(try await Self.get(admin, "/readyz").status == 503)
                try await Task.sleep(for: .milliseconds(500))
                #expect(try await Self.get(admin, "/readyz").status == 503)

                // Now the upstream appears on that port.
                let key = try P256.Signing.PrivateKey(
                    pemRepresentation: try String(
                        contentsOfFile: environment.directory + "/AuthKey.p8",
                        encoding: .utf8
                    )
                )
                var configuration = MockAPNsConfiguration(
                    certificateChain: [environment.pki.server.certificate],
                    privateKey: environment.pki.server.privateKey
                )
                configuration.port = upstreamPort
                configuration.signingKeys = [
                    .init(keyID: UpstreamHarness.keyID, teamID: UpstreamHarness.teamID, publicKey: key.publicKey)
                ]
                configuration.topics = [UpstreamHarness.topic]
                try await withResource(
                    try await MockAPNsServer.start(configuration: configuration, logger: .forTests())
                ) { mock in
                    let ready =
                        (try? await eventually(
                            "/readyz to answer 200",
                            timeout: .seconds(45),
                            interval: .milliseconds(250)
                        ) {
                            try await Self.get(admin, "/readyz").status == 200
                        }) != nil
                    #expect(ready)

                    let before = try PrometheusText(try await Self.get(admin, "/metrics").body)
                    let badToken = Self.token(connection: 0, identifier: 11)
                    mock.script.rejectAsBadToken(badToken.hexDump(format: .compact))
                    let client = try await LegacyConnection.connect(
                        to: bridge.gatewayAddress,
                        identity: try environment.provider(),
                        trusting: environment.pki.caCertificate
                    )
                    var frames = ByteBuffer()
                    for identifier in 1...11 {
                        frames.writeImmutableBuffer(
                            FrameBuilder.frame(
                                .itemized,
                                identifier: UInt32(identifier),
                                token: Self.token(connection: 0, identifier: identifier),
                                payload: FrameBuilder.payload()
                            )
                        )
                    }
                    try await client.send(frames)
                    var answer = try await client.bytesUntilClose(timeout: .seconds(20))
                    #expect(
                        answer.readErrorResponse()
                            == ErrorResponsePacket(
                                status: .invalidToken,
                                identifier: NotificationIdentifier(rawValue: 11)
                            )
                    )

                    let after = try PrometheusText(try await Self.get(admin, "/metrics").body)
                    #expect(
                        after.value("apns_bridge_notifications_received_total")
                            - before.value("apns_bridge_notifications_received_total") == 11
                    )
                    #expect(
                        after.value("apns_bridge_notifications_forwarded_total")
                            - before.value("apns_bridge_notifications_forwarded_total") == 10
                    )
                    #expect(
                        after.value(#"apns_bridge_notifications_failed_total{status="8",reason="BadDeviceToken"}"#) == 1
                    )
                    #expect(after.value(#"apns_bridge_error_responses_total{status="8"}"#) == 1)
                    #expect(after.value(#"apns_bridge_upstream_responses_total{status="400"}"#) == 1)
                    #expect(after.value("apns_bridge_upstream_request_duration_seconds_count") >= 11)
                    #expect(after.value("apns_bridge_provider_tokens_minted_total") >= 1)
                    #expect(
                        after.value(#"apns_bridge_upstream_connections{environment="sandbox",state="usable"}"#) >= 1
                    )
                    #expect(
                        after.samples[#"apns_bridge_upstream_connections{environment="sandbox",state="draining"}"#]
                            == 0,
                        "the draining series is there from the start, at 0"
                    )
                    #expect(after.types["apns_bridge_upstream_request_duration_seconds"] == "histogram")
                    #expect(after.types["apns_bridge_notifications_received_total"] == "counter")
                    #expect(after.types["apns_bridge_notifications_in_flight"] == "gauge")
                }
            }
        }
    }

    @Test("No log line at info or above holds a whole device token, a payload, a key or a JWT")
    func logsKeepSecrets() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            environment.mock.script.unregister(
                token: Self.token(connection: 0, identifier: 2).hexDump(format: .compact),
                atMilliseconds: 1_767_225_600_000
            )
            environment.mock.script.rejectAsBadToken(Self.token(connection: 0, identifier: 3).hexDump(format: .compact))
            var arguments = environment.arguments
            arguments[arguments.firstIndex(of: "debug")!] = "info"
            let bridge = try await BridgeProcess.start(
                environment,
                store: "sqlite:\(environment.directory)/store.sqlite",
                arguments: arguments
            )
            let client = try await LegacyConnection.connect(
                to: bridge.gatewayAddress,
                identity: try environment.provider(),
                trusting: environment.pki.caCertificate
            )
            var frames = ByteBuffer()
            for identifier in 1...4 {
                frames.writeImmutableBuffer(
                    FrameBuilder.frame(
                        .itemized,
                        identifier: UInt32(identifier),
                        token: Self.token(connection: 0, identifier: identifier),
                        payload: FrameBuilder.payload(#"{"aps":{"alert":"secret text 7f3a"}}"#)
                    )
                )
            }
            frames.writeImmutableBuffer(
                FrameBuilder.frame(
                    .itemized,
                    identifier: 5,
                    token: FrameBuilder.token(5, length: 31),
                    payload: FrameBuilder.payload()
                )
            )
            try await client.send(frames)
            _ = try await client.bytesUntilClose(timeout: .seconds(20))
            _ = try await FeedbackPoller.poll(
                bridge.feedbackAddress,
                identity: try environment.provider(),
                trusting: environment.pki.caCertificate
            )
            await bridge.terminate()

            let log = bridge.log
            #expect(log.contains("notification failed; closing provider connection"))  // the log did say things
            let keyBody = try String(contentsOfFile: environment.directory + "/AuthKey.p8", encoding: .utf8)
                .split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
            for identifier in 1...4 {
                #expect(!log.contains(Self.token(connection: 0, identifier: identifier).hexDump(format: .compact)))
            }
            #expect(!log.contains("secret text 7f3a"))
            #expect(!log.contains("\"aps\""))
            #expect(!log.contains("eyJ"))  // the start of every JWT (base64 of `{"`)
            #expect(!log.contains("PRIVATE KEY"))
            #expect(!log.contains(String(keyBody.prefix(40))))
            #expect(!log.contains("bearer"))
        }
    }
}

extension ServeProcessTests {
    @Test(
        "A clean SIGTERM or SIGINT, after traffic and with a provider connected, logs nothing at error level (SQLite and PostgreSQL)",
        arguments: [SIGTERM, SIGINT],
        StoreKind.available
    )
    func cleanStopLogsNoError(signal: Int32, kind: StoreKind) async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let store = kind == .sqlite ? "sqlite:\(environment.directory)/store.sqlite" : try await kind.makeLocation()
            let bridge = try await BridgeProcess.start(environment, store: store)
            let identity = try environment.provider()
            let provider = try await LegacyConnection.connect(
                to: bridge.gatewayAddress,
                identity: identity,
                trusting: environment.pki.caCertificate
            )
            var frames = ByteBuffer()
            for n in 0..<20 {
                frames.writeImmutableBuffer(
                    FrameBuilder.frame(
                        .itemized,
                        identifier: UInt32(n + 1),
                        token: FrameBuilder.token(n),
                        payload: FrameBuilder.payload()
                    )
                )
            }
            try await provider.send(frames)
            #expect(await environment.mock.ledger.waitForAccepted(20))
            _ = try await FeedbackPoller.poll(
                bridge.feedbackAddress,
                identity: identity,
                trusting: environment.pki.caCertificate
            )
            await bridge.stop(with: signal)
            #expect(bridge.process.terminationStatus == 0)
            #expect(bridge.log.contains(" stopped"))
            #expect(bridge.errorLines.isEmpty, "\(bridge.errorLines.joined(separator: "\n"))")
            await provider.close()
        }
    }

    @Test(
        "apns-bridge send: an error-response is reported; without one it returns once the bridge closed after its close_notify"
    )
    func sendCommand() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            try await withResource(
                try await BridgeProcess.start(environment, store: "sqlite:\(environment.directory)/store.sqlite")
            ) { bridge in
                let files = try environment.provider().writePEMFiles(to: environment.directory, name: "provider")
                let gateway = "127.0.0.1:\(try #require(bridge.gatewayAddress.port))"
                func send(_ token: ByteBuffer) async throws -> (status: Int32, output: String) {
                    try await DeployFilesTests.run(
                        BridgeProcess.executable,
                        [
                            "send", "--gateway", gateway, "--certificate", files.certificate, "--private-key",
                            files.privateKey,
                            "--ca", environment.directory + "/ca.pem", "--server-name", "localhost",
                            "--token", token.hexDump(format: .compact), "--wait-ms", "200",
                        ]
                    )
                }
                let accepted = try await send(FrameBuilder.token(0x5E4D))
                #expect(accepted.status == 0)
                // The bridge's close came after the client's close_notify, not NIOSSL's 5-second
                // shutdown timer (what `--wait-ms 1000` used to take 6 s for).
                #expect(
                    accepted.output.contains("the bridge took them and closed the connection after close_notify"),
                    "\(accepted.output)"
                )
                let bad = FrameBuilder.token(0xBAD)
                environment.mock.script.rejectAsBadToken(bad.hexDump(format: .compact))
                let rejected = try await send(bad)
                #expect(rejected.status == 1)
                // Within the wait, or (a slow build) after the close_notify: the same packet either way.
                #expect(
                    rejected.output.contains("error-response: status 8 (invalid token), identifier 1;"),
                    "\(rejected.output)"
                )
                #expect(await environment.mock.ledger.waitForAccepted(1))
            }
        }
    }

    @Test("A certificate subject with a newline cannot write a forged line into the text log")
    func logLinesCannotBeForged() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let bridge = try await BridgeProcess.start(
                environment,
                store: "sqlite:\(environment.directory)/store.sqlite"
            )
            let forged = "critical apns-bridge: [BridgeApp] forged entry"
            let identity = try environment.pki.providerIdentity(
                bundleID: "com.example.app\n2026-11-25T00:00:00+0000 \(forged)"
            )
            let client = try await LegacyConnection.connect(
                to: bridge.gatewayAddress,
                identity: identity,
                trusting: environment.pki.caCertificate
            )
            _ = try? await client.bytesUntilClose(timeout: .seconds(10))
            await bridge.terminate()
            let lines = bridge.log.split(separator: "\n")
            #expect(
                lines.contains { $0.contains("refusing a client certificate") && $0.contains(forged) },
                "the subject was logged, on the refusal's own line"
            )
            #expect(
                !lines.contains { $0.hasPrefix("2026-11-25T00:00:00+0000") },
                "no line starts where the subject's newline was"
            )
        }
    }
}

/// The Prometheus text exposition format, read strictly enough to fail on malformed lines.
struct PrometheusText {
    var samples: [String: Double] = [:]
    var types: [String: String] = [:]

    init(_ text: String) throws {
        for line in text.split(separator: "\n") {
            if line.hasPrefix("# TYPE ") {
                let parts = line.split(separator: " ")
                guard parts.count == 4, ["counter", "gauge", "histogram", "summary", "untyped"].contains(parts[3])
                else { throw Malformed(line: String(line)) }
                self.types[String(parts[2])] = String(parts[3])
                continue
            }
            if line.hasPrefix("#") { continue }
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                throw Malformed(line: String(line))
            }
            let name = String(line[..<space])
            guard name.first?.isLetter == true,
                name.allSatisfy({ $0.isLetter || $0.isNumber || "_{}=\",.+-:".contains($0) })
            else {
                throw Malformed(line: String(line))
            }
            self.samples[name] = value
        }
    }

    /// The sample's value, 0 when absent (a counter that has not moved yet).
    func value(_ name: String) -> Double {
        self.samples[name] ?? 0
    }

    struct Malformed: Error { var line: String }
}

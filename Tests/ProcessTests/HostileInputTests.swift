import BridgeApp
import BridgeCore
import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import Logging
import NIOCore
import NIOPosix
import Synchronization
import Testing

/// Hostile input against `apns-bridge serve` (docs/operations.md, "Logs"): what anyone can send
/// without a trusted certificate must not grow the log without bound.
/// (In `ServeStartupTests`' serialized suite: fewer bridges at a time beside the other tests.)
extension ServeStartupTests {
    @Test(
        "Certificates from a CA of one's own with a 30,000-character UID: each refusal counted, one short line per 10 s"
    )
    func refusedCertificatesCannotFloodTheLog() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            try await withResource(
                try await BridgeProcess.start(environment, store: "sqlite:\(environment.directory)/store.sqlite")
            ) { bridge in
                let stranger = try DevelopmentCA(name: "anyone's CA")
                let identity = try stranger.providerIdentity(
                    bundleID: "com.example." + String(repeating: "x", count: 30_000)
                )
                // Few, but more than one a line: each handshake parses a 30 KB certificate,
                // slow in a debug build beside the other tests.
                let count = 6
                let started = ContinuousClock.now
                for _ in 0..<count {
                    if let client = try? await LegacyConnection.connect(
                        to: bridge.gatewayAddress,
                        identity: identity,
                        trusting: environment.pki.caCertificate
                    ) {
                        _ = try? await client.bytesUntilClose(timeout: .seconds(10))
                    }
                }
                let elapsed = ContinuousClock.now - started
                let admin = try #require(bridge.adminPort)
                try await eventually("\(count) refusals counted") {
                    try PrometheusText(try await ServeProcessTests.get(admin, "/metrics").body).value(
                        "apns_bridge_refused_client_certificates_total"
                    ) == Double(count)
                }
                let lines = bridge.log.split(separator: "\n").filter { $0.contains("refusing a client certificate") }
                // One line per 10-second interval at most, however slow the machine made the loop.
                #expect(!lines.isEmpty)
                #expect(lines.count <= 1 + Int(elapsed / .seconds(10)), "\(lines.count) lines in \(elapsed)")
                #expect(lines.allSatisfy { $0.utf8.count < 1024 }, "the UID is cut: \(lines.map(\.utf8.count))")
                #expect(lines.first?.contains("(30012 bytes)") == true)
                #expect(bridge.log.utf8.count < 200_000, "the whole log: \(bridge.log.utf8.count) bytes")
            }
        }
    }
}

/// The admin port against a web page the operator opens (docs/operations.md, "The admin port").
/// (In the same serialized suite as the refusals: each test starts processes of its own.)
extension ServeStartupTests {
    /// One request by CPython's http.client with exactly these headers; the status code.
    static func request(_ port: Int, _ method: String, _ path: String, headers: [String: String]) async throws -> Int {
        let script = """
            import http.client, json, sys
            c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
            c.request(sys.argv[2], sys.argv[3], body=b"", headers=json.loads(sys.argv[4]))
            print(c.getresponse().status)
            """
        let headersJSON = String(decoding: try JSONSerialization.data(withJSONObject: headers), as: UTF8.self)
        let run = try await ChildRun.run(
            "python3",
            ["-c", script, "\(port)", method, path, headersJSON],
            timeout: .seconds(60)
        )
        return Int(run.output.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    @Test(
        "A cross-origin POST /-/reload or GET /push-log and a rebinding Host are refused with 403 and run nothing; the admin's own address, localhost and curl-like requests are answered",
        .enabled(if: executablePath("python3") != nil || interopRequired)
    )
    func hostAndOriginChecked() async throws {
        let reloads = Counter()
        var logger = Logger(label: "apns-bridge.test")
        logger.logLevel = .warning
        let admin = try await AdminServer.start(
            host: "127.0.0.1",
            port: 0,
            probes: .init(
                isReady: { true },
                reload: {
                    reloads.increment()
                    return (true, "ok")
                },
                pushLog: PushLog(capacity: 10)
            ),
            registry: nil,
            logger: logger
        )
        let port = try #require(admin.localAddress.port)
        let own = "127.0.0.1:\(port)"
        #expect(
            try await Self.request(
                port,
                "POST",
                "/-/reload",
                headers: ["Host": own, "Origin": "http://evil.example", "Content-Type": "text/plain"]
            ) == 403
        )
        #expect(try await Self.request(port, "POST", "/-/reload", headers: ["Host": own, "Origin": "null"]) == 403)
        #expect(try await Self.request(port, "GET", "/healthz", headers: ["Host": "attacker.example:\(port)"]) == 403)
        #expect(try await Self.request(port, "POST", "/-/reload", headers: ["Host": "attacker.example:\(port)"]) == 403)
        // The push log's entries are for this machine's operator too, not for a page they open.
        #expect(
            try await Self.request(port, "GET", "/push-log", headers: ["Host": own, "Origin": "http://evil.example"])
                == 403
        )
        #expect(try await Self.request(port, "GET", "/push-log", headers: ["Host": "attacker.example:\(port)"]) == 403)
        #expect(try await Self.request(port, "GET", "/push-log?status=410", headers: ["Host": own]) == 200)
        #expect(try await Self.request(port, "GET", "/push-log?status=gone", headers: ["Host": own]) == 400)
        #expect(reloads.value == 0, "nothing refused ran")
        #expect(try await Self.request(port, "POST", "/-/reload", headers: ["Host": own]) == 200)
        #expect(
            try await Self.request(port, "POST", "/-/reload", headers: ["Host": own, "Origin": "http://\(own)"]) == 200
        )
        #expect(try await Self.request(port, "GET", "/healthz", headers: ["Host": "localhost:\(port)"]) == 200)
        #expect(try await Self.request(port, "GET", "/healthz", headers: ["Host": "[::1]:\(port)"]) == 200)
        #expect(reloads.value == 2)
        await admin.close()
    }

    final class Counter: Sendable {
        private let count = Mutex(0)
        func increment() { self.count.withLock { $0 += 1 } }
        var value: Int { self.count.withLock { $0 } }
    }
}

/// A careless operator's store URL: PostgreSQL that nothing answers.
extension ServeStartupTests {
    /// A loopback port nothing listens on (bound, then closed).
    static func closedPort() async throws -> Int {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(
            host: "127.0.0.1",
            port: 0
        ).get()
        let port = channel.localAddress!.port!
        try await channel.close()
        return port
    }

    @Test("report and serve name the cause at once (connection refused), not a circuit breaker after 67 s")
    func unreachableNamed() async throws {
        let url = "postgres://bridge:secret@127.0.0.1:\(try await Self.closedPort())/bridge?sslmode=disable"
        // runToExitWithOutput gives up after 30 s: the old wait was 67.5 s.
        let report = try await ServeStartupTests.runToExitWithOutput(["report", "--store", url])
        #expect(report.status != 0)
        #expect(report.stderr.lowercased().contains("refused"), "\(report.stderr)")
        #expect(!report.stderr.contains("secret"), "the password is not printed")
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let serve = try await ServeStartupTests.runToExitWithOutput(environment.arguments + ["--store", url])
            #expect(serve.status == 78, "\(serve.stderr.suffix(2000))")
            #expect(
                serve.stderr.contains("store.url") && serve.stderr.lowercased().contains("refused"),
                "\(serve.stderr.suffix(2000))"
            )
        }
    }
}

import BridgeApp
import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import Logging
import MockAPNs
import NIOCore
import NIOPosix
import Testing

/// On `apns-bridge serve` as a child process: what cannot start is
/// refused with exit 78 and the key at fault, before a database is created; the admin port
/// closes idle connections; refusals at the connection cap are logged at a bounded rate.
@Suite("serve: refusing to start, small bounds (child processes)", .serialized)
struct ServeStartupTests {
    /// Runs `apns-bridge` to its exit (30 s at most); returns its exit status and standard error.
    static func runToExit(_ arguments: [String]) async throws -> (status: Int32, stderr: String) {
        let result = try await Self.runToExitWithOutput(arguments)
        return (result.status, result.stderr)
    }

    /// Runs `apns-bridge` to its exit (30 s at most); returns its exit status, standard output
    /// and standard error.
    static func runToExitWithOutput(
        _ arguments: [String]
    ) async throws -> (status: Int32, stdout: String, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BridgeProcess.executable)
        process.arguments = arguments
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "apns-bridge-exit-\(UUID().uuidString)"
        )
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let errorPath = directory.appendingPathComponent("stderr").path
        let outputPath = directory.appendingPathComponent("stdout").path
        _ = FileManager.default.createFile(atPath: errorPath, contents: nil)
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errorPath))
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        try process.run()
        _ = try? await eventually("apns-bridge to exit", timeout: .seconds(30)) { !process.isRunning }
        if process.isRunning {
            process.terminate()
            throw TimedOut(what: "apns-bridge to exit")
        }
        return (
            process.terminationStatus,
            (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "",
            (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
        )
    }

    @Test("A port in use: exit 78 naming the key and the address, before the store is created or any listener is up")
    func portInUse() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let occupier = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .bind(host: "127.0.0.1", port: 0).get()
            defer { occupier.close(promise: nil) }
            let port = try #require(occupier.localAddress?.port)
            var arguments = environment.arguments
            let index = try #require(arguments.firstIndex(of: "--feedback"))
            arguments[index + 1] = "127.0.0.1:\(port)"
            let (status, stderr) = try await Self.runToExit(
                arguments + ["--store", "sqlite:\(environment.directory)/store.sqlite"]
            )
            #expect(status == 78)
            #expect(stderr.contains("feedback.listen"))
            #expect(stderr.contains("127.0.0.1:\(port)"))
            #expect(
                !FileManager.default.fileExists(atPath: "\(environment.directory)/store.sqlite"),
                "the store was never opened"
            )
            #expect(
                !stderr.contains("store opened") && !stderr.contains("gateway listening"),
                "nothing was started: \(stderr)"
            )
        }
    }

    @Test(
        "A key that is not the certificate's, a store that is not a database: exit 78, the key named, no database created"
    )
    func refusedBeforeAnythingStarts() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let other = try DevelopmentCA()
            let otherFiles = try other.server.writePEMFiles(to: environment.directory, name: "other")
            let store = "\(environment.directory)/never.sqlite"

            let mismatched = try await Self.runToExit(
                environment.arguments + ["--private-key", otherFiles.privateKey, "--store", "sqlite:\(store)"]
            )
            #expect(mismatched.status == 78)
            #expect(mismatched.stderr.contains("tls.privateKey"))
            #expect(mismatched.stderr.contains("other.key"))
            #expect(!mismatched.stderr.contains("failedToLoadPrivateKey\n"), "never a bare library error")
            #expect(!FileManager.default.fileExists(atPath: store))

            let notADatabase = "\(environment.directory)/notes.txt"
            try "hello\n".write(toFile: notADatabase, atomically: true, encoding: .utf8)
            let badStore = try await Self.runToExit(environment.arguments + ["--store", "sqlite:\(notADatabase)"])
            #expect(badStore.status == 78)
            #expect(badStore.stderr.contains("store.url"))
            #expect(
                try String(contentsOfFile: notADatabase, encoding: .utf8) == "hello\n",
                "the file is left as it was"
            )

            let badKeyID = try await Self.runToExit(
                environment.arguments.map {
                    $0.hasPrefix(UpstreamHarness.keyID + ":")
                        ? "SHORT:" + $0.dropFirst(UpstreamHarness.keyID.count + 1) : $0
                }
                    + ["--store", "sqlite:\(store)"]
            )
            #expect(badKeyID.status == 78)
            #expect(badKeyID.stderr.contains("credential.default.keyId"))
            #expect(!FileManager.default.fileExists(atPath: store))
        }
    }

    @Test("A misspelt key: serve refuses to start, naming the key and the nearest known one")
    func misspeltKey() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let (status, stderr) = try await Self.runToExit(
                environment.arguments + [
                    "--set", "gateway.maximumInFlght=10", "--store", "sqlite:\(environment.directory)/never.sqlite",
                ]
            )
            #expect(status == 78)
            #expect(stderr.contains("gateway.maximumInFlght"))
            #expect(stderr.contains("did you mean gateway.maximumInFlight?"))
            #expect(!FileManager.default.fileExists(atPath: "\(environment.directory)/never.sqlite"))
        }
    }

    @Test(
        "check-config --keys lists every key of the schema with its variable, range and reload, and needs no configuration"
    )
    func checkConfigListsKeys() async throws {
        let listed = try await Self.runToExitWithOutput(["check-config", "--keys"])
        #expect(listed.status == 0)
        let lines = listed.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2 * ConfigurationKey.allKeys.count)
        for key in ConfigurationKey.allKeys {
            #expect(lines.contains("\(key.name)  \(key.environmentVariable)"), "\(key.name) is not listed")
        }
        #expect(lines.contains { $0.hasPrefix("    1 to 1000000; restart. ") }, "gateway.maximumConnections' range")
        #expect(lines.contains { $0.hasPrefix("    true or false; live. Offer TLS 1.3") })
    }

    @Test(
        "check-config lists every key that was set, as read, with the store's password hidden"
    )
    func checkConfigListsSetKeys() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let checked = try await Self.runToExitWithOutput(
                ["check-config"] + environment.arguments.dropFirst() + [
                    "--set", "proxyProtocol.loadBalancers=10.4.0.0/16",
                    "--set", "tls.closeNotifyWaitSeconds=7",
                    "--store", "postgres://bridge:hunter2@db.example:5432/bridge",
                ]
            )
            #expect(checked.status == 0, "\(checked.stderr)")
            let lines = checked.stdout.split(separator: "\n").map(String.init)
            #expect(lines.contains("  proxyProtocol.loadBalancers = 10.4.0.0/16"), "\(checked.stdout)")
            #expect(lines.contains("  tls.closeNotifyWaitSeconds = 7"), "\(checked.stdout)")
            #expect(lines.contains { $0.hasPrefix("  store.url = postgres://bridge:") }, "\(checked.stdout)")
            #expect(!checked.stdout.contains("hunter2"))
        }
    }

    @Test("Refusals at the connection cap are counted and logged at a bounded rate, not once per connection")
    func refusalsLoggedAtABoundedRate() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let bridge = try await BridgeProcess.start(
                environment,
                store: "sqlite:\(environment.directory)/store.sqlite",
                extraArguments: ["--set", "gateway.maximumConnections=1"]
            )
            // The one connection the cap allows, admitted and through its handshake before the rest
            // arrive: a notification through it reaching the mock proves both.
            let holder = try await LegacyConnection.connect(
                to: bridge.gatewayAddress,
                identity: try environment.provider(),
                trusting: environment.pki.caCertificate
            )
            try await holder.send(
                FrameBuilder.frame(
                    .itemized,
                    identifier: 1,
                    token: FrameBuilder.token(1),
                    payload: FrameBuilder.payload()
                )
            )
            #expect(await environment.mock.ledger.waitForAccepted(1))
            var refused = 0
            let started = ContinuousClock.now
            for _ in 0..<40 {
                let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(
                    to: bridge.gatewayAddress
                ).get()
                try await channel.closeFuture.get()  // closed by the bridge as soon as it is accepted
                refused += 1
            }
            let elapsed = ContinuousClock.now - started
            let metrics = try await ServeProcessTests.get(try #require(bridge.adminPort), "/metrics").body
            await holder.close()
            await bridge.terminate()
            let lines = bridge.log.split(separator: "\n").filter { $0.contains("refusing connections: limit reached") }
            #expect(refused == 40)
            #expect(lines.count >= 1)
            // One line per 10-second interval, however slow a loaded machine made the 40 connects.
            #expect(
                lines.count <= 2 + Int(elapsed / .seconds(10)),
                "one line per interval (10 s), not one per connection: \(lines.count) in \(elapsed)"
            )
            // Every listener's series exists from the start: the gateway's is the one that counts.
            let counted = metrics.split(separator: "\n").first {
                $0.hasPrefix("apns_bridge_refused_connections_total") && $0.contains("listener=\"gateway\"")
                    && $0.contains("reason=\"connections\"")
            }
            #expect(counted.flatMap { Double($0.split(separator: " ").last ?? "") } == 40)
        }
    }

    @Test("apns-bridge healthcheck: exit 0 when /readyz answers 200, 1 when 503, 1 when nothing listens")
    func healthcheck() async throws {
        var logger = Logger(label: "apns-bridge.test")
        logger.logLevel = .warning
        for ready in [true, false] {
            let admin = try await AdminServer.start(
                host: "127.0.0.1",
                port: 0,
                probes: .init(isReady: { ready }),
                registry: nil,
                logger: logger
            )
            let port = try #require(admin.localAddress.port)
            // A loaded machine may take seconds to start the child: the timeout is not what is tested.
            let answered = try await Self.runToExitWithOutput([
                "healthcheck", "--admin", "127.0.0.1:\(port)", "--timeout", "60",
            ])
            #expect(answered.status == (ready ? 0 : 1), "\(answered.stdout)")
            #expect(answered.stdout.contains("GET /readyz on 127.0.0.1:\(port): \(ready ? 200 : 503)"))
            await admin.close()
            if !ready {
                let (closedStatus, _) = try await Self.runToExit([
                    "healthcheck", "--admin", "127.0.0.1:\(port)", "--timeout", "2",
                ])
                #expect(closedStatus == 1, "nothing listens there any more")
            }
        }
    }

    @Test(
        "--log-format json: every line of the log is one JSON object with timestamp, level, label and message; no whole token"
    )
    func jsonLogs() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let bridge = try await BridgeProcess.start(
                environment,
                store: "sqlite:\(environment.directory)/store.sqlite",
                extraArguments: ["--log-format", "json"]
            )
            let token = FrameBuilder.token(0x150A)
            let bad = FrameBuilder.token(0xBAD)
            environment.mock.script.rejectAsBadToken(bad.hexDump(format: .compact))
            let provider = try await LegacyConnection.connect(
                to: bridge.gatewayAddress,
                identity: try environment.provider(),
                trusting: environment.pki.caCertificate
            )
            var frames = FrameBuilder.frame(.itemized, identifier: 1, token: token, payload: FrameBuilder.payload())
            frames.writeImmutableBuffer(
                FrameBuilder.frame(.itemized, identifier: 2, token: bad, payload: FrameBuilder.payload())
            )
            try await provider.send(frames)
            var answer = try await provider.bytesUntilClose()
            #expect(answer.readErrorResponse()?.status == .invalidToken)
            await bridge.terminate()

            let lines = bridge.log.split(separator: "\n")
            #expect(lines.count > 5)
            for line in lines {
                let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                #expect(object != nil, "not a JSON object: \(line.prefix(200))")
                for key in ["timestamp", "level", "label", "message"] {
                    #expect(object?[key] is String, "\(key) missing: \(line.prefix(200))")
                }
                #expect(!line.contains(token.hexDump(format: .compact)), "a whole token in the log")
                #expect(!line.contains(bad.hexDump(format: .compact)), "a whole token in the log")
            }
            #expect(lines.contains { $0.contains("notification failed; closing provider connection") })
        }
    }

    @Test("The admin port closes a connection that sends nothing")
    func adminIdle() async throws {
        var logger = Logger(label: "apns-bridge.test")
        logger.logLevel = .warning
        let admin = try await AdminServer.start(
            host: "127.0.0.1",
            port: 0,
            probes: .init(isReady: { true }),
            registry: nil,
            // Long enough that a request on a loaded machine (a debug build, 2 cores, every other
            // test running) is never taken for an idle connection.
            idleTimeout: .seconds(3),
            logger: logger
        )
        let port = try #require(admin.localAddress.port)
        #expect(try await ServeProcessTests.get(port, "/healthz").status == 200)
        let idle = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(
            host: "127.0.0.1",
            port: port
        ).get()
        try await idle.closeFuture.get()  // the admin server closed it; without the bound this never returns
        await admin.close()
    }
}

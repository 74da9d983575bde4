import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import MockAPNs
import NIOCore
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// On `apns-bridge serve` as a child process: SIGHUP, `apns-bridge reload`
/// and a watched file change apply tenants without a restart; an invalid configuration is
/// refused and the running one stays.
@Suite("serve: reloading the configuration (child processes)", .serialized)
struct ReloadTests {
    /// The bundle id of a second tenant; its rule gives it the mock's topic.
    static let otherBundle = "com.example.reloaded"

    /// A configuration file with the given tenants (names → uid), every certificate and key from
    /// the environment, `tenantLines` added to a tenant's block (`key: value` lines), and `extra`
    /// YAML lines at the end.
    static func config(
        _ environment: BridgeProcess.Environment,
        tenants: [(String, String)],
        tenantLines: [String: [String]] = [:],
        extra: String = ""
    ) -> String {
        let directory = environment.directory
        var text = """
            environment: sandbox
            acceptUnlistedCertificates: false
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
            upstream:
              sandbox: 127.0.0.1:\(environment.mock.port)
              production: 127.0.0.1:9
              ca: \(directory)/ca.pem
              serverName: localhost
            gateway: {listen: "127.0.0.1:0"}
            feedback: {listen: "127.0.0.1:0"}
            admin: {listen: "127.0.0.1:0"}
            log: {level: debug}
            tenants: [\(tenants.map(\.0).joined(separator: ", "))]
            tenant:

            """
        for (name, uid) in tenants {
            text += "  \(name):\n    uid: \(uid)\n    topic: \(UpstreamHarness.topic)\n"
            for line in tenantLines[name] ?? [] {
                text += "    \(line)\n"
            }
        }
        return text + extra
    }

    static func start(
        _ environment: BridgeProcess.Environment,
        config: String,
        extraArguments: [String] = []
    ) async throws -> (BridgeProcess, String) {
        let path = environment.directory + "/apns-bridge.yaml"
        try config.write(toFile: path, atomically: true, encoding: .utf8)
        let bridge = try await BridgeProcess.start(
            environment,
            store: "sqlite:\(environment.directory)/store.sqlite",
            arguments: ["serve", "--config", path] + extraArguments
        )
        return (bridge, path)
    }

    /// Waits (30 s at most) until the bridge's log has `count` lines containing `text`.
    static func waitForLog(_ bridge: BridgeProcess, _ text: String, count: Int = 1) async throws -> [Substring] {
        try await eventually(
            "\(count) log line(s) with \"\(text)\"; the log ends: \(bridge.log.suffix(3000))",
            timeout: .seconds(30)
        ) {
            let lines = bridge.log.split(separator: "\n").filter { $0.contains(text) }
            return lines.count >= count ? lines : nil
        }
    }

    static func frame(_ identifier: UInt32) -> ByteBuffer {
        FrameBuilder.frame(
            .itemized,
            identifier: identifier,
            token: FrameBuilder.token(Int(identifier)),
            payload: FrameBuilder.payload()
        )
    }

    @Test("SIGHUP adding a tenant: its certificate connects, and another tenant's open connection keeps working")
    func sighupAddsATenant() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let (bridge, path) = try await Self.start(
                environment,
                config: Self.config(environment, tenants: [("shop", UpstreamHarness.topic)])
            )
            try await withResource(bridge) { bridge in
                let pki = environment.pki

                let shop = try await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try environment.provider(),
                    trusting: pki.caCertificate
                )
                try await shop.send(Self.frame(1))
                #expect(await environment.mock.ledger.waitForAccepted(1))

                // Not a tenant yet: refused during the handshake.
                let early = try? await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try pki.providerIdentity(bundleID: Self.otherBundle),
                    trusting: pki.caCertificate
                )
                if let early {
                    try? await early.send(Self.frame(2))
                    #expect(try await early.bytesUntilClose().readableBytes == 0)
                }
                #expect(environment.mock.ledger.accepted.count == 1)

                try Self.config(
                    environment,
                    tenants: [("shop", UpstreamHarness.topic), ("reloaded", Self.otherBundle)]
                )
                .write(toFile: path, atomically: true, encoding: .utf8)
                kill(bridge.process.processIdentifier, SIGHUP)
                let reloaded = try await Self.waitForLog(bridge, "configuration reloaded")
                #expect(reloaded.contains { $0.contains("tenants added: reloaded") }, "\(reloaded)")

                let other = try await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try pki.providerIdentity(bundleID: Self.otherBundle),
                    trusting: pki.caCertificate
                )
                try await other.send(Self.frame(3))
                #expect(await environment.mock.ledger.waitForAccepted(2))
                try await shop.send(Self.frame(4))
                #expect(await environment.mock.ledger.waitForAccepted(3))
                #expect(shop.isActive, "the first tenant's connection was not dropped by the reload")
                await other.close()
                await shop.close()
            }
        }
    }

    @Test("An invalid configuration is refused, naming the key; the running one stays (SIGHUP and apns-bridge reload)")
    func invalidReloadRefused() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let (bridge, path) = try await Self.start(
                environment,
                config: Self.config(environment, tenants: [("shop", UpstreamHarness.topic)])
            )
            try await withResource(bridge) { bridge in
                let pki = environment.pki
                let shop = try await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try environment.provider(),
                    trusting: pki.caCertificate
                )

                // A misspelt key, and a tenant added in the same file: nothing of it applies.
                try Self.config(
                    environment,
                    tenants: [("shop", UpstreamHarness.topic), ("reloaded", Self.otherBundle)],
                    extra: "gateway.maximumInFlght: 10\n"
                )
                .write(toFile: path, atomically: true, encoding: .utf8)
                kill(bridge.process.processIdentifier, SIGHUP)
                let refused = try await Self.waitForLog(bridge, "configuration reload refused")
                #expect(
                    refused.contains { $0.contains("gateway.maximumInFlght") && $0.contains("gateway.maximumInFlight") }
                )

                let admin = "127.0.0.1:\(try #require(bridge.adminPort))"
                let command = try await ServeStartupTests.runToExitWithOutput(["reload", "--admin", admin])
                #expect(command.status == 1)
                #expect(command.stdout.contains("gateway.maximumInFlght"))
                let metrics = try await ServeProcessTests.get(try #require(bridge.adminPort), "/metrics").body
                #expect(metrics.contains("apns_bridge_config_last_reload_successful 0"))

                // The running configuration stays: the new tenant is still refused, the old one served.
                let early = try? await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try pki.providerIdentity(bundleID: Self.otherBundle),
                    trusting: pki.caCertificate
                )
                if let early {
                    try? await early.send(Self.frame(2))
                    #expect(try await early.bytesUntilClose().readableBytes == 0)
                }
                try await shop.send(Self.frame(1))
                #expect(await environment.mock.ledger.waitForAccepted(1))
                #expect(environment.mock.ledger.accepted.count == 1)
                await shop.close()
            }
        }
    }

    @Test("apns-bridge reload removing a tenant: its open connection gets status 10 and closes; the other stays")
    func reloadRemovesATenant() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let both = [("shop", UpstreamHarness.topic), ("reloaded", Self.otherBundle)]
            // Watching off: the reload below is this test's, not a watch tick that could come
            // first and leave it nothing to change.
            let noWatch = "reload: {watchIntervalSeconds: 0}\n"
            let (bridge, path) = try await Self.start(
                environment,
                config: Self.config(environment, tenants: both, extra: noWatch)
            )
            try await withResource(bridge) { bridge in
                let pki = environment.pki
                let shop = try await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try environment.provider(),
                    trusting: pki.caCertificate
                )
                let other = try await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try pki.providerIdentity(bundleID: Self.otherBundle),
                    trusting: pki.caCertificate
                )
                try await other.send(Self.frame(7))
                #expect(await environment.mock.ledger.waitForAccepted(1))

                try Self.config(
                    environment,
                    tenants: [("shop", UpstreamHarness.topic)],
                    extra: noWatch + "upstream.connectionsPerPool: 3\n"
                )
                .write(toFile: path, atomically: true, encoding: .utf8)
                let command = try await ServeStartupTests.runToExitWithOutput([
                    "reload", "--admin", "127.0.0.1:\(try #require(bridge.adminPort))",
                ])
                #expect(command.status == 0)
                #expect(command.stdout.contains("tenants removed: reloaded"))
                #expect(command.stdout.contains("applied only at restart: upstream.connectionsPerPool"))

                var farewell = try await other.bytesUntilClose()
                let packet = farewell.readErrorResponse()
                #expect(packet?.status == .shutdown)
                #expect(packet?.identifier.rawValue == 7, "names the last notification it completed")
                try await shop.send(Self.frame(8))
                #expect(await environment.mock.ledger.waitForAccepted(2))
                #expect(shop.isActive)
                await shop.close()
            }
        }
    }

    struct WriteOnlyRun: Decodable {
        var writes: Int
        var failed_after_seconds: Double?
    }

    @Test(
        "A tenant's own close after an error-response (no drain, no close-notify wait: Apple's quick close) applies from a reload on; a client that only writes then sees a write fail at once instead of after the listener's 20 s",
        .enabled(if: LegacyHabits.available)
    )
    func tenantCloseAppliedOnReload() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let tenants = [("shop", UpstreamHarness.topic)]
            let (bridge, path) = try await Self.start(
                environment,
                config: Self.config(environment, tenants: tenants),
                extraArguments: ["--set", "tls.closeNotifyWaitSeconds=20"]
            )
            try await withResource(bridge) { bridge in
                let directory = environment.directory
                let files = try LegacyHabits.Files(
                    identity: try environment.provider(),
                    pki: environment.pki,
                    in: directory,
                    name: "writer"
                )
                // An empty payload: status 4 at once; then a good frame every 10 ms, never reading.
                let bad = FrameBuilder.frame(
                    .itemized,
                    identifier: 1,
                    token: FrameBuilder.token(1),
                    payload: ByteBuffer()
                )
                let arguments = [
                    "127.0.0.1", "\(bridge.gatewayAddress.port!)", files.certificate, files.privateKey, files.ca,
                    try LegacyHabits.file(bad, in: directory), try LegacyHabits.file(Self.frame(2), in: directory),
                    "10",
                ]

                // The listener's close: 0.5 s of drain, then up to 20 s for a close_notify that
                // never comes. No write fails within 3 s (a timer never fires early).
                let before = try await LegacyHabits.python("write-only", arguments + ["300"], as: WriteOnlyRun.self)
                #expect(
                    before.failed_after_seconds == nil,
                    "a write failed after \(before.failed_after_seconds ?? 0) s"
                )

                try Self.config(
                    environment,
                    tenants: tenants,
                    tenantLines: ["shop": ["errorDrainSeconds: 0", "closeNotifyWaitSeconds: 0"]]
                )
                .write(toFile: path, atomically: true, encoding: .utf8)
                let checked = try await ServeStartupTests.runToExitWithOutput([
                    "check-config", "--config", path, "--set", "tls.closeNotifyWaitSeconds=20",
                ])
                #expect(checked.status == 0, "\(checked.stderr)")
                #expect(
                    checked.stdout.contains(
                        "closing   after an error-response: 0.5 s of drain, then close_notify and up to 20 s for the client's"
                    ),
                    "\(checked.stdout)"
                )
                #expect(
                    checked.stdout.contains(
                        "    closing: its own, 0 s of drain, then up to 0 s for the client's close_notify"
                    ),
                    "\(checked.stdout)"
                )
                kill(bridge.process.processIdentifier, SIGHUP)
                let reloaded = try await Self.waitForLog(bridge, "configuration reloaded")
                #expect(reloaded.contains { $0.contains("tenants changed: shop") }, "\(reloaded)")

                // The tenant's own close: the connection ends with the packet, and a write soon
                // fails. Well under the listener's 20.5 s; the margin is for a loaded machine.
                let after = try await LegacyHabits.python("write-only", arguments + ["1500"], as: WriteOnlyRun.self)
                let failedAfter = try #require(after.failed_after_seconds, "no write failed in \(after.writes) writes")
                #expect(failedAfter < 10, "the first failed write came \(failedAfter) s after the bad frame")
                #expect(environment.mock.ledger.accepted.isEmpty, "a frame written after an error was forwarded")
            }
        }
    }

    @Test("With watching on, a changed configuration file is reloaded without a signal")
    func watchedFile() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let (bridge, path) = try await Self.start(
                environment,
                config: Self.config(
                    environment,
                    tenants: [("shop", UpstreamHarness.topic)],
                    extra: "reload: {watchIntervalSeconds: 0.2}\n"
                )
            )
            try await withResource(bridge) { bridge in
                try Self.config(
                    environment,
                    tenants: [("shop", UpstreamHarness.topic), ("reloaded", Self.otherBundle)],
                    extra: "reload: {watchIntervalSeconds: 0.2}\n"
                )
                .write(toFile: path, atomically: true, encoding: .utf8)
                let reloaded = try await Self.waitForLog(bridge, "tenants added: reloaded")
                #expect(!reloaded.isEmpty)
                let other = try await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try environment.pki.providerIdentity(bundleID: Self.otherBundle),
                    trusting: environment.pki.caCertificate
                )
                try await other.send(Self.frame(1))
                #expect(await environment.mock.ledger.waitForAccepted(1))
                await other.close()
            }
        }
    }
}

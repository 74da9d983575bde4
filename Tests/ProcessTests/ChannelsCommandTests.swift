import BridgeApp
import BridgeServer
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

/// `apns-bridge channels` as a child process against MockAPNs' channel management API:
/// create (added to the configuration file), list, get, delete, and the derived token.
@Suite("channels: the CLI against the mock's channel management API (child processes)", .serialized)
struct ChannelsCommandTests {
    static func json(_ text: String) throws -> [String: Any] {
        let object = try JSONSerialization.jsonObject(with: Data(text.utf8))
        return try #require(object as? [String: Any], "not a JSON object: \(text)")
    }

    @Test("create --add-to-config, list, get, delete and token round-trip")
    func roundTrip() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let file = environment.directory + "/apns-bridge.yaml"
            try "# the operator's comment\ntenants: [app]\ntenant:\n  app:\n    uid: \(UpstreamHarness.topic)\n".write(
                toFile: file,
                atomically: true,
                encoding: .utf8
            )
            // The options of `serve`, without the subcommand: the mock is upstream.sandbox, so the
            // channel management API is reached there too.
            let options = Array(environment.arguments.dropFirst()) + ["--config", file]
            func run(_ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
                try await ServeStartupTests.runToExitWithOutput(["channels"] + arguments + options)
            }

            let created = try await run(["create", "--tenant", "app", "--name", "finals", "--add-to-config", "--json"])
            try #require(created.status == 0, "\(created.stderr)")
            let result = try Self.json(created.stdout)
            let id = try #require(result["channelId"] as? String)
            let token = try #require(result["channelToken"] as? String)
            #expect(token == ChannelToken.hex(ChannelToken.derive(tenant: "app", channelID: id)))
            #expect(result["messageStoragePolicy"] as? Int == 1)
            #expect(environment.mock.channels.ids(bundleID: UpstreamHarness.topic) == [id])
            // The file now configures the channel, and still loads; the old one is kept.
            let rewritten = try String(contentsOfFile: file, encoding: .utf8)
            #expect(rewritten.contains(id) && rewritten.contains(token))
            #expect(try String(contentsOfFile: file + ".bak", encoding: .utf8).contains("the operator's comment"))
            let checked = try await ServeStartupTests.runToExitWithOutput(["check-config"] + options)
            #expect(checked.status == 0, "\(checked.stderr)")
            #expect(checked.stdout.contains("channel finals"))

            let listed = try await run(["list", "--tenant", "app", "--json"])
            try #require(listed.status == 0, "\(listed.stderr)")
            let channels = try #require(try Self.json(listed.stdout)["channels"] as? [[String: Any]])
            #expect(channels.count == 1)
            #expect(channels.first?["channelId"] as? String == id)
            #expect(channels.first?["name"] as? String == "finals")
            #expect(channels.first?["channelToken"] as? String == token)

            let read = try await run(["get", "--tenant", "app", id, "--json"])
            try #require(read.status == 0, "\(read.stderr)")
            let info = try Self.json(read.stdout)
            #expect(info["messageStoragePolicy"] as? Int == 1)
            #expect(info["pushType"] as? String == "LiveActivity")

            let deleted = try await run(["delete", "--tenant", "app", id])
            #expect(deleted.status == 0, "\(deleted.stderr)")
            #expect(environment.mock.channels.ids(bundleID: UpstreamHarness.topic).isEmpty)
            let empty = try await run(["list", "--tenant", "app", "--json"])
            #expect((try Self.json(empty.stdout)["channels"] as? [Any])?.isEmpty == true)

            // APNs' refusal is printed with its reason and exits 1; an unknown tenant exits 78.
            let missing = try await run(["get", "--tenant", "app", id])
            #expect(missing.status == 1)
            #expect(missing.stderr.contains("400 ChannelNotRegistered"))
            let unknown = try await run(["list", "--tenant", "nobody"])
            #expect(unknown.status == 78)
            #expect(unknown.stderr.contains("no tenant nobody"))

            // The derived token needs no configuration and no network.
            let derived = try await ServeStartupTests.runToExitWithOutput(["channels", "token", "--tenant", "app", id])
            #expect(derived.status == 0)
            #expect(derived.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == token)
        }
    }

    @Test("A channel created with --add-to-config reaches an open provider connection after SIGHUP")
    func reloadAddsAChannelToOpenConnections() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let (bridge, path) = try await ReloadTests.start(
                environment,
                config: ReloadTests.config(environment, tenants: [("app", UpstreamHarness.topic)])
            )
            try await withResource(bridge) { bridge in
                let connection = try await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try environment.provider(),
                    trusting: environment.pki.caCertificate
                )
                try await connection.send(ReloadTests.frame(1))
                #expect(await environment.mock.ledger.waitForAccepted(1))

                let created = try await ServeStartupTests.runToExitWithOutput([
                    "channels", "create", "--tenant", "app", "--config", path, "--add-to-config", "--json",
                ])
                try #require(created.status == 0, "\(created.stderr)")
                let hex = try #require(try Self.json(created.stdout)["channelToken"] as? String)
                let token = try #require(ChannelToken.parse(hex: hex))
                kill(bridge.process.processIdentifier, SIGHUP)
                _ = try await ReloadTests.waitForLog(bridge, "configuration reloaded")
                _ = try await ReloadTests.waitForLog(bridge, "changed this tenant's channels")

                // The same connection: its next frame to the channel token is a broadcast.
                try await connection.send(
                    FrameBuilder.frame(.itemized, identifier: 2, token: token, payload: FrameBuilder.payload())
                )
                #expect(
                    await environment.mock.ledger.waitForRecords {
                        $0.contains { $0.api == .broadcast && $0.wasAccepted }
                    }
                )
                #expect(connection.isActive)

                // The status page lists the channel: its id, not its token.
                let id = try #require(try Self.json(created.stdout)["channelId"] as? String)
                let page = try await ServeProcessTests.get(try #require(bridge.adminPort), "/")
                #expect(page.status == 200)
                #expect(page.body.contains("<th>broadcast channel</th>"))
                #expect(page.body.contains("<td>\(id)</td>"))
                #expect(!page.body.contains(hex), "a channel token on the page")
                await connection.close()
            }
        }
    }
}

import BridgeApp
import BridgeCore
import BridgeForwarding
import BridgeServer
import BridgeTestSupport
import NIOCore
import Testing
import UpstreamAPNs

/// Live Activity channels in the configuration (docs/broadcast.md): what is refused, and what
/// a good channel resolves to.
@Suite("Configuration: broadcast channels")
struct ChannelConfigurationTests {
    @Test("A bad channel configuration is refused with an error naming the key")
    func badChannelConfiguration() async throws {
        let files = try ConfigurationFiles()
        defer { files.remove() }
        let good = "dHN0LXNyY2gtY2hubA=="
        let cases: [([String: String], String)] = [
            (["tenant.app.channels": "live"], "tenant.app.channel.live.id"),
            (
                ["tenant.app.channels": "live", "tenant.app.channel.live.id": "not base64!"],
                "tenant.app.channel.live.id"
            ),
            (
                [
                    "tenant.app.channels": "live", "tenant.app.channel.live.id": good,
                    "tenant.app.channel.live.token": "abcd",
                ], "tenant.app.channel.live.token"
            ),
            (
                [
                    "tenant.app.channels": "live", "tenant.app.channel.live.id": good,
                    "tenant.app.channel.live.messageStoragePolicy": "2",
                ],
                "tenant.app.channel.live.messageStoragePolicy"
            ),
            (
                ["tenant.app.channels": "a,b", "tenant.app.channel.a.id": good, "tenant.app.channel.b.id": good],
                "tenant.app.channel.b.id"
            ),
            (
                [
                    "tenant.app.channels": "a,b", "tenant.app.channel.a.id": good,
                    "tenant.app.channel.b.id": "b3RoZXI=",
                    "tenant.app.channel.a.token": String(repeating: "ab", count: 32),
                    "tenant.app.channel.b.token": String(repeating: "AB", count: 32),
                ],
                "tenant.app.channel.b.token"
            ),
            (
                [
                    "tenant.app.channels": "live", "tenant.app.channel.live.id": good,
                    "tenant.app.channel.other.id": good,
                ], "tenant.app.channel.other.id"
            ),
        ]
        for (flags, key) in cases {
            var all = files.basics
            all["tenants"] = "app"
            all["tenant.app.uid"] = UpstreamHarness.topic
            all.merge(flags) { $1 }
            let reader = try await SettingsReader(flags: all, environment: [:], file: nil)
            let error = #expect(throws: ConfigurationError.self) { try BridgeSettings.load(from: reader) }
            #expect(error?.key == key, "\(flags)")
        }

        // A good one: the token defaults to the derived one; the broadcast host follows
        // upstream.sandbox when only that is set.
        var all = files.basics
        all["tenants"] = "app"
        all["tenant.app.uid"] = UpstreamHarness.topic
        all["tenant.app.channels"] = "live"
        all["tenant.app.channel.live.id"] = good
        all["tenant.app.channel.live.messageStoragePolicy"] = "0"
        all["upstream.sandbox"] = "127.0.0.1:2197"
        let settings = try BridgeSettings.load(from: try await SettingsReader(flags: all, environment: [:], file: nil))
        let channel = try #require(settings.tenants.rules.first?.channels.all.first)
        #expect(channel.token == ChannelToken.derive(tenant: "app", channelID: good))
        #expect(channel.storesMessages == false)
        #expect(settings.upstream.broadcastEndpoints[.sandbox]?.host == "127.0.0.1")
        #expect(settings.upstream.broadcastEndpoints[.production]?.host == "api-broadcast.push.apple.com")
        #expect(settings.channelManagementEndpoints[.production]?.port == 2196)
    }
}

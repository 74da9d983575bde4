import ArgumentParser
import BridgeApp
import BridgeCore
import BridgeForwarding
import BridgeServer
import BridgeStores
import Foundation
import NIOCore
import UpstreamAPNs

struct CheckConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Reads the configuration like `serve` would, checks it, and prints what it resolves to.",
        discussion: """
            Takes the same options as `serve`. Exits 0 when the configuration can be served, 78 \
            with the key at fault otherwise. Secrets (keys, passwords) are never printed. Under \
            `set` it lists every key that was set (flag, environment or file) as it was read. \
            `--keys` lists every configuration key instead: its environment variable, its values, \
            and whether a reload applies it (live) or it needs a restart.
            """
    )

    @OptionGroup var options: BridgeOptions

    @Flag(help: "List every configuration key (environment variable, values, live or restart) and exit.")
    var keys = false

    func run() async throws {
        if self.keys {
            print(Self.listKeys())
            return
        }
        let (settings, set) = try await self.options.loadSettingsWithSetValues()
        print(Self.describe(settings))
        // Every key that was set (flag, environment or file), as read: the summary above
        // leaves some out. Keys not listed have their defaults (`--keys`).
        print("set       \(set.isEmpty ? "nothing: every key has its default" : "")")
        for (key, value) in set {
            let shown = key == ConfigurationKey.storeURL.name ? BridgeStoreLocation.redacted(value) : value
            print("  \(key) = \(shown)")
        }
    }

    static func describe(_ settings: BridgeSettings) -> String {
        var lines: [String] = []
        lines.append(
            "gateway   \(settings.gateway.host):\(settings.gateway.port)  (max \(settings.gateway.maximumConnections) connections, \(settings.gateway.session.maximumInFlight) in flight each)"
        )
        lines.append(
            "feedback  \(settings.feedback.host):\(settings.feedback.port)\(settings.feedback.drain.only32ByteTokens ? "  (32-byte tokens only)" : "")"
        )
        lines.append("admin     \(settings.admin.map { "\($0.host):\($0.port)" } ?? "off")")
        let tls = settings.gateway.tls
        lines.append(
            "tls       \(settings.tlsFiles.certificate); client CAs: \(tls.clientCertificateAuthorities.count) certificate(s); pinned: \(tls.pinnedFingerprints.count); TLS \(tls.allowLegacyTLS ? "1.0" : "1.2")–\(tls.allowTLS13 ? "1.3" : "1.2")"
        )
        lines.append(
            "closing   after an error-response: \(Self.seconds(settings.gateway.errorDrainTime)) of drain, then close_notify and up to \(Self.seconds(tls.closeNotifyWait)) for the client's; after a poll's last tuple: \(Self.seconds(settings.feedback.closeDelay)), then the same"
        )
        lines.append("store     \(BridgeStoreLocation.redacted(settings.storeLocation))")
        lines.append("http/2    \(settings.upstream.client.engine) engine (this build has: \(BridgeVersion.engines))")
        for environment in APNsEnvironment.allCases {
            if let endpoint = settings.upstream.endpoints[environment] {
                lines.append("upstream  \(environment.rawValue): \(endpoint.host):\(endpoint.port)")
            }
            if let broadcast = settings.upstream.broadcastEndpoints[environment],
                let channels = settings.channelManagementEndpoints[environment]
            {
                lines.append(
                    "          broadcasts \(broadcast.host):\(broadcast.port), channel management \(channels.host):\(channels.port)"
                )
            }
        }
        for name in settings.credentials.keys.sorted() {
            let marker = name == settings.defaultCredentials ? " (default)" : ""
            lines.append("credentials \(name)\(marker): \(settings.credentials[name]!.summary)")
        }
        lines.append("tenants   (default environment \(settings.tenants.defaultEnvironment.rawValue))")
        for rule in settings.tenants.rules {
            var match: [String] = []
            if let userID = rule.userID { match.append("UID=\(userID)") }
            match += rule.fingerprints.sorted().map { "sha256 \($0.prefix(16))…" }
            lines.append(
                "  \(rule.name): matches \(match.joined(separator: " or ")); topic \(rule.topic ?? "the certificate's UID"); environment \(rule.environment?.rawValue ?? "from the certificate"); credentials \(rule.credentials ?? settings.defaultCredentials)"
            )
            if rule.closing != ClosingOverrides() {
                let drain = rule.closing.errorDrain.map { Self.seconds($0) } ?? "the listener's"
                let wait = rule.closing.closeNotifyWait.map { Self.seconds($0) } ?? "the listener's"
                lines.append(
                    "    closing: its own, \(drain) of drain, then up to \(wait) for the client's close_notify"
                )
            }
            for channel in rule.channels.all {
                let storage =
                    channel.storesMessages.map {
                        $0 ? "most recent message stored" : "no message stored (expiration 0)"
                    } ?? "storage policy not given"
                lines.append(
                    "    channel \(channel.name): id \(channel.id), channel token \(ChannelToken.hex(channel.token).prefix(8))…, \(storage)"
                )
            }
        }
        if settings.tenants.acceptsUnlistedCertificates {
            lines.append(
                "  any other certificate with a UID= (verified by a client CA): a tenant of its own, topic = UID, credentials \(settings.defaultCredentials)"
            )
        } else {
            lines.append("  any other certificate is refused during the TLS handshake")
        }
        return lines.joined(separator: "\n")
    }

    /// `0.5 s`, `5 s`.
    static func seconds(_ amount: TimeAmount) -> String {
        let seconds = Double(amount.nanoseconds) / 1e9
        return seconds == seconds.rounded() ? "\(Int(seconds)) s" : "\(seconds) s"
    }

    /// Every key of the schema, two lines each.
    static func listKeys() -> String {
        ConfigurationKey.allKeys.map { key in
            "\(key.name)  \(key.environmentVariable)\n    \(key.range); \(key.applies.rawValue). \(key.summary.prefix(1).uppercased() + key.summary.dropFirst())"
        }.joined(separator: "\n")
    }
}

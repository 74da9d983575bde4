import BridgeCore
import BridgeServer
import NIOCore
import UpstreamAPNs

/// Tenants (`tenants`, `tenant.NAME.*`, `acceptUnlistedCertificates`) and their Live Activity
/// channels (`tenant.NAME.channel.CHANNEL.*`), cross-checked against each other and against the
/// credentials.
extension BridgeSettings {
    static func readTenants(
        _ settings: SettingsReader,
        credentials: [String: CredentialSource],
        defaultEnvironment: APNsEnvironment
    ) throws -> ConfiguredTenantResolver {
        var rules: [TenantRule] = []
        var fingerprintOwners: [String: String] = [:]
        for name in try settings.names(.tenants) {
            func key(_ key: ConfigurationKey) -> ConfigurationKey { key.named(name) }
            let fingerprints = settings.list(key(.tenantFingerprints)).map(TenantRule.normalizedFingerprint)
            for fingerprint in fingerprints {
                guard fingerprint.count == 64 else {
                    throw ConfigurationError(
                        key: key(.tenantFingerprints).name,
                        "\(fingerprint) is not a SHA-256 fingerprint (64 hex digits)"
                    )
                }
                if let owner = fingerprintOwners.updateValue(name, forKey: fingerprint) {
                    throw ConfigurationError(
                        key: key(.tenantFingerprints).name,
                        "\(fingerprint) also belongs to tenant \(owner)"
                    )
                }
            }
            let rule = TenantRule(
                name: name,
                fingerprints: Set(fingerprints),
                userID: settings.string(key(.tenantUID)),
                topic: settings.string(key(.tenantTopic)),
                environment: try settings.string(key(.tenantEnvironment)).map { _ in
                    try settings.choice(key(.tenantEnvironment), default: defaultEnvironment, Self.environments)
                },
                credentials: settings.string(key(.tenantCredentials)),
                channels: try Self.loadChannels(tenant: name, settings),
                closing: ClosingOverrides(
                    errorDrain: try settings.optionalTimeAmount(key(.tenantErrorDrain)),
                    closeNotifyWait: try settings.optionalTimeAmount(key(.tenantCloseNotifyWait))
                )
            )
            if let topic = rule.topic, !Tenant.isValidTopic(topic) {
                throw ConfigurationError(
                    key: key(.tenantTopic).name,
                    "\(String(reflecting: topic)) is not an APNs topic (a bundle id: letters, digits, hyphens and dots, with an optional push-type suffix)"
                )
            }
            guard rule.userID != nil || !rule.fingerprints.isEmpty else {
                throw ConfigurationError(
                    key: key(.tenantUID).name,
                    "tenant \(name) matches no certificate: give its uid or fingerprints"
                )
            }
            if let userID = rule.userID, let other = rules.first(where: { $0.userID == userID }) {
                throw ConfigurationError(key: key(.tenantUID).name, "\(userID) is also the uid of tenant \(other.name)")
            }
            if let credential = rule.credentials, credentials[credential] == nil {
                throw ConfigurationError(
                    key: key(.tenantCredentials).name,
                    "\"\(credential)\" is not listed in credentials"
                )
            }
            rules.append(rule)
        }
        let acceptsUnlisted = try settings.bool(.acceptUnlistedCertificates, default: rules.isEmpty)
        return ConfiguredTenantResolver(
            rules: rules,
            defaultEnvironment: defaultEnvironment,
            acceptsUnlistedCertificates: acceptsUnlisted
        )
    }

    /// A tenant's Live Activity channels (`tenant.NAME.channels` and `tenant.NAME.channel.CHANNEL.*`).
    static func loadChannels(tenant: String, _ settings: SettingsReader) throws -> BroadcastChannels {
        var channels: [BroadcastChannel] = []
        var owners: (ids: [String: String], tokens: [ByteBuffer: String]) = ([:], [:])
        for name in try settings.names(ConfigurationKey.tenantChannels.named(tenant)) {
            func key(_ key: ConfigurationKey) -> ConfigurationKey { key.named(tenant, channel: name) }
            guard let id = settings.string(key(.channelID)) else {
                throw ConfigurationError(
                    key: key(.channelID).name,
                    "channel \(name) has no id: give the channel id APNs issued (apns-bridge channels create makes one)"
                )
            }
            guard ChannelToken.isValidChannelID(id) else {
                throw ConfigurationError(
                    key: key(.channelID).name,
                    "\"\(id)\" is not a channel id (base64, as APNs issues it)"
                )
            }
            let token: ByteBuffer
            if let text = settings.string(key(.channelToken)) {
                guard let parsed = ChannelToken.parse(hex: text) else {
                    throw ConfigurationError(
                        key: key(.channelToken).name,
                        "not a channel token: 64 hex digits (32 bytes), like a device token"
                    )
                }
                token = parsed
            } else {
                token = ChannelToken.derive(tenant: tenant, channelID: id)
            }
            var storesMessages: Bool?
            if settings.string(key(.channelStoragePolicy)) != nil {
                storesMessages = try settings.int(key(.channelStoragePolicy), default: 1) == 1
            }
            if let other = owners.ids.updateValue(name, forKey: id) {
                throw ConfigurationError(
                    key: key(.channelID).name,
                    "channel \(other) of tenant \(tenant) has the same id"
                )
            }
            if let other = owners.tokens.updateValue(name, forKey: token) {
                throw ConfigurationError(
                    key: key(.channelToken).name,
                    "channel \(other) of tenant \(tenant) has the same channel token"
                )
            }
            channels.append(BroadcastChannel(name: name, id: id, token: token, storesMessages: storesMessages))
        }
        return BroadcastChannels(channels)
    }
}

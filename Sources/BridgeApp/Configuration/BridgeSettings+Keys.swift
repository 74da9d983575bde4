/// What the schema decides about keys as a whole: which are known (a key nothing reads is a
/// typo, refused), and which a reload applies live.
extension BridgeSettings {
    /// Every valid key, for the tenants, channels and credentials the settings list.
    package static func knownKeys(
        tenants: [String],
        credentials: [String],
        channels: [String: [String]] = [:]
    ) -> Set<String> {
        ConfigurationKey.known(tenants: tenants, credentials: credentials, channels: channels)
    }

    /// Whether a reload applies a change of the key to the running bridge; a change of any other
    /// key is reported as needing a restart (listeners, limits, the store, the upstream
    /// connections' settings).
    package static func isLive(_ key: String) -> Bool {
        ConfigurationKey.entry(for: key)?.applies == .live
    }

    /// The keys whose values differ between `self` and `other` (set, unset or changed).
    package func changedKeys(comparedWith other: BridgeSettings) -> [String] {
        Set(self.values.keys).union(other.values.keys).filter { key in
            (self.values[key] ?? nil) != (other.values[key] ?? nil)
        }.sorted()
    }

    /// A key in the file or the flags that the bridge does not know is a mistake (a typo, or a
    /// tenant not listed in `tenants`): refused, naming the nearest known key.
    static func rejectUnknownKeys(_ settings: SettingsReader) throws {
        let tenants = try settings.names(.tenants)
        var channels: [String: [String]] = [:]
        for tenant in tenants {
            channels[tenant] = try settings.names(ConfigurationKey.tenantChannels.named(tenant))
        }
        let known = Self.knownKeys(tenants: tenants, credentials: try settings.names(.credentials), channels: channels)
        guard let unknown = settings.unknownKeys(known: known).first else { return }
        var message = "not a configuration key"
        let parts = unknown.key.split(separator: ".").map(String.init)
        let leaves = (
            tenant: Set(ConfigurationKey.tenantKeys.map(\.leaf)),
            credential: Set(ConfigurationKey.credentialKeys.map(\.leaf))
        )
        if parts.count == 3, parts[0] == "tenant", leaves.tenant.contains(parts[2]) {
            message += "; tenant \(parts[1]) is not listed in tenants"
        } else if parts.count == 3, parts[0] == "credential", leaves.credential.contains(parts[2]) {
            message += "; credentials \(parts[1]) are not listed in credentials"
        } else if let nearest = unknown.nearest {
            message += "; did you mean \(nearest)?"
        }
        throw ConfigurationError(key: unknown.key, message + " (docs/configuration.md lists every key)")
    }
}

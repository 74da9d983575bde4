// The keys of one tenant, one of its channels and one set of credentials, and what is derived
// from the whole schema: the known keys, and which of them a reload applies.

extension ConfigurationKey {
    // One tenant: `tenant.NAME.*`.
    static let tenantUID = Self(
        "tenant.NAME.uid",
        .text,
        .live,
        "certificates whose subject UID= is this belong to the tenant"
    )
    static let tenantFingerprints = Self(
        "tenant.NAME.fingerprints",
        .list,
        .live,
        "certificates with these SHA-256 fingerprints belong to the tenant"
    )
    static let tenantTopic = Self(
        "tenant.NAME.topic",
        .text,
        .live,
        "the apns-topic of its notifications (default the certificate's UID=)"
    )
    static let tenantEnvironment = Self(
        "tenant.NAME.environment",
        .choice(["production", "sandbox", "development"]),
        .live,
        "its APNs environment (default the certificate's marker, else environment)"
    )
    static let tenantCredentials = Self(
        "tenant.NAME.credentials",
        .text,
        .live,
        "which credentials its notifications are sent with (default defaultCredentials)"
    )
    static let tenantChannels = Self("tenant.NAME.channels", .names, .live, "names of its Live Activity channels")
    static let tenantErrorDrain = Self(
        "tenant.NAME.errorDrainSeconds",
        .seconds(0...10),
        .live,
        "its own gateway.errorDrainSeconds (0 with closeNotifyWaitSeconds 0: Apple's quick close, for providers that only write)"
    )
    static let tenantCloseNotifyWait = Self(
        "tenant.NAME.closeNotifyWaitSeconds",
        .seconds(0...60),
        .live,
        "its own tls.closeNotifyWaitSeconds, on both ports"
    )

    // One channel of a tenant: `tenant.NAME.channel.CHANNEL.*`.
    static let channelID = Self(
        "tenant.NAME.channel.CHANNEL.id",
        .text,
        .live,
        "the channel id APNs issued (base64; required)"
    )
    static let channelToken = Self(
        "tenant.NAME.channel.CHANNEL.token",
        .text,
        .live,
        "the channel token, 64 hex digits (default derived)"
    )
    static let channelStoragePolicy = Self(
        "tenant.NAME.channel.CHANNEL.messageStoragePolicy",
        .whole(0...1),
        .live,
        "0: no message stored (expiration 0 is sent); 1: the most recent stored"
    )

    // One set of upstream credentials: `credential.NAME.*`.
    static let credentialKeyFile = Self(
        "credential.NAME.keyFile",
        .file,
        .live,
        "a .p8 signing key (authentication tokens), with keyId and teamId"
    )
    static let credentialKeyID = Self(
        "credential.NAME.keyId",
        .text,
        .live,
        "the signing key's id (10 letters and digits)"
    )
    static let credentialTeamID = Self(
        "credential.NAME.teamId",
        .text,
        .live,
        "the team that owns the key (10 letters and digits)"
    )
    static let credentialCertificate = Self(
        "credential.NAME.certificate",
        .file,
        .live,
        "or: a PEM client certificate for APNs, with privateKey"
    )
    static let credentialPrivateKey = Self("credential.NAME.privateKey", .file, .live, "its PEM private key")
    static let credentialPKCS12 = Self(
        "credential.NAME.pkcs12",
        .file,
        .live,
        "or: a PKCS#12 file, with pkcs12Password"
    )
    static let credentialPKCS12Password = Self(
        "credential.NAME.pkcs12Password",
        .text,
        .live,
        "the PKCS#12 file's password (secret: never printed)"
    )

    package static let tenantKeys: [ConfigurationKey] = [
        .tenantUID, .tenantFingerprints, .tenantTopic, .tenantEnvironment, .tenantCredentials, .tenantChannels,
        .tenantErrorDrain, .tenantCloseNotifyWait,
    ]
    package static let channelKeys: [ConfigurationKey] = [.channelID, .channelToken, .channelStoragePolicy]
    package static let credentialKeys: [ConfigurationKey] = [
        .credentialKeyFile, .credentialKeyID, .credentialTeamID, .credentialCertificate, .credentialPrivateKey,
        .credentialPKCS12, .credentialPKCS12Password,
    ]

    /// Every key, the named ones with their placeholders.
    package static var allKeys: [ConfigurationKey] {
        Self.schema + Self.tenantKeys + Self.channelKeys + Self.credentialKeys
    }

    /// Every valid key for the tenants, channels and credentials the settings list.
    static func known(tenants: [String], credentials: [String], channels: [String: [String]]) -> Set<String> {
        var keys = Set(Self.schema.map(\.name))
        for tenant in tenants {
            keys.formUnion(Self.tenantKeys.map { $0.named(tenant).name })
            for channel in channels[tenant] ?? [] {
                keys.formUnion(Self.channelKeys.map { $0.named(tenant, channel: channel).name })
            }
        }
        for name in credentials {
            keys.formUnion(Self.credentialKeys.map { $0.named(name).name })
        }
        return keys
    }

    /// The schema's entry of a key as read (`tenant.shop.uid` is `tenant.NAME.uid`), if any.
    static func entry(for key: String) -> ConfigurationKey? {
        if let fixed = Self.schema.first(where: { $0.name == key }) { return fixed }
        let parts = key.split(separator: ".").map(String.init)
        let candidates: [ConfigurationKey] =
            switch (parts.first, parts.count) {
            case ("tenant", 3): Self.tenantKeys
            case ("tenant", 5) where parts[2] == "channel": Self.channelKeys
            case ("credential", 3): Self.credentialKeys
            default: []
            }
        return candidates.first { $0.leaf == parts.last }
    }
}

import BridgeCore
import BridgeServer
import BridgeStores
import BridgeUpstream
import Crypto
import Foundation
import Logging
import NIOCore
import NIOSSL
import UpstreamAPNs

/// Everything `apns-bridge serve` runs with, resolved and checked: files read, names
/// cross-checked, defaults applied. docs/configuration.md lists every key.
public struct BridgeSettings: Sendable {
    /// Upstream credentials as configured; the secrets themselves stay in their files until
    /// ``makeCredentials(logger:)``.
    public enum CredentialSource: Sendable, Equatable {
        case signingKey(keyFile: String, keyID: String, teamID: String)
        case certificate(certificateFile: String, privateKeyFile: String)
        case pkcs12(file: String, passphrase: String?)

        /// The files holding the secret (and certificate).
        public var files: [String] {
            switch self {
            case .signingKey(let file, _, _): [file]
            case .certificate(let certificate, let key): [certificate, key]
            case .pkcs12(let file, _): [file]
            }
        }

        public var summary: String {
            switch self {
            case .signingKey(let file, let keyID, let teamID): "signing key \(keyID) of team \(teamID) (\(file))"
            case .certificate(let certificate, _): "certificate \(certificate)"
            case .pkcs12(let file, _): "PKCS#12 \(file)"
            }
        }
    }

    /// The files of the legacy listeners' TLS.
    public struct TLSFiles: Sendable, Equatable {
        public var certificate: String
        public var privateKey: String
        public var clientCAs: [String]
    }

    public var logLevel: Logger.Level
    public var logFormat: LogFormat
    public var gateway: GatewayConfiguration
    public var feedback: FeedbackConfiguration
    public var tlsFiles: TLSFiles
    /// How often the configuration file and the files it names are checked for changes, which
    /// are then reloaded (as on SIGHUP); `nil`: only on SIGHUP or `apns-bridge reload`.
    public var watchInterval: Duration?
    public var tenants: ConfiguredTenantResolver
    public var credentials: [String: CredentialSource]
    public var defaultCredentials: String
    public var upstream: APNsNotificationUpstream.Configuration
    /// Where `apns-bridge channels` reaches each environment's channel management API.
    public var channelManagementEndpoints: [APNsEnvironment: APNsEndpoint]
    public var storeLocation: String
    public var store: BridgeStoreConfiguration
    public var admin: (host: String, port: Int)?
    /// Every key read, with its value as text (`nil`: not set), to tell what a reload changes.
    public var values: [String: String?]

    /// Reads, checks and resolves the settings; a ``ConfigurationError`` names the first key
    /// that cannot be used.
    public static func load(from settings: SettingsReader) throws -> BridgeSettings {
        do {
            let loaded = try Self.read(settings)
            // A value of the wrong shape read as unset: refused rather than defaulted.
            if let wrongShape = settings.wrongShape { throw wrongShape }
            return loaded
        } catch let error as ConfigurationError {
            // It may be what caused this error (a tenant's uid given as a list, say): name it.
            throw settings.wrongShape ?? error
        }
    }

    private static func read(_ settings: SettingsReader) throws -> BridgeSettings {
        try Self.rejectUnknownKeys(settings)
        let logLevel = try settings.choice(
            "log.level",
            default: Logger.Level.info,
            Dictionary(uniqueKeysWithValues: Logger.Level.allCases.map { ($0.rawValue, $0) })
        )
        let logFormat = try settings.choice("log.format", default: LogFormat.text, ["text": .text, "json": .json])
        let defaultEnvironment = try settings.choice("environment", default: APNsEnvironment.production, Self.environments)

        // Legacy listeners' TLS.
        let tlsFiles = TLSFiles(
            certificate: try settings.requiredFile("tls.certificate", why: "the PEM certificate (chain) the legacy ports present"),
            privateKey: try settings.requiredFile("tls.privateKey", why: "the PEM private key of tls.certificate"),
            clientCAs: try settings.list("tls.clientCA").map { path in
                guard FileManager.default.isReadableFile(atPath: path) else {
                    throw ConfigurationError(key: "tls.clientCA", "cannot read the file \(path)")
                }
                return path
            }
        )
        var tls = try Self.loadTLS(tlsFiles)
        tls.pinnedFingerprints = Set(settings.list("tls.pinnedFingerprints").map(TenantRule.normalizedFingerprint))
        for fingerprint in tls.pinnedFingerprints where fingerprint.count != 64 {
            throw ConfigurationError(key: "tls.pinnedFingerprints", "\(fingerprint) is not a SHA-256 fingerprint (64 hex digits)")
        }
        tls.allowTLS13 = try settings.bool("tls.allowTLS13", default: false)
        tls.allowLegacyTLS = try settings.bool("tls.allowLegacyTLS", default: false)
        // `tls.reloadIntervalSeconds` is the name of earlier versions.
        let watchKey = settings.string("reload.watchIntervalSeconds") == nil && settings.string("tls.reloadIntervalSeconds") != nil
            ? "tls.reloadIntervalSeconds" : "reload.watchIntervalSeconds"
        let watchSeconds = try settings.seconds(watchKey, default: 10, range: 0...86_400)
        let watchInterval: Duration? = watchSeconds == .zero ? nil : watchSeconds

        // Upstream credentials.
        let credentialNames = try settings.names("credentials")
        var credentials: [String: CredentialSource] = [:]
        for name in credentialNames {
            credentials[name] = try Self.loadCredential(name, settings)
        }
        guard !credentials.isEmpty else {
            throw ConfigurationError(key: "credentials", "no upstream credentials: list at least one (a .p8 signing key, or a certificate)")
        }
        let defaultCredentials = settings.string("defaultCredentials") ?? credentialNames[0]
        guard credentials[defaultCredentials] != nil else {
            throw ConfigurationError(key: "defaultCredentials", "\"\(defaultCredentials)\" is not listed in credentials")
        }

        // Tenants.
        var rules: [TenantRule] = []
        var fingerprintOwners: [String: String] = [:]
        for name in try settings.names("tenants") {
            let prefix = "tenant.\(name)."
            let fingerprints = settings.list(prefix + "fingerprints").map(TenantRule.normalizedFingerprint)
            for fingerprint in fingerprints {
                guard fingerprint.count == 64 else {
                    throw ConfigurationError(key: prefix + "fingerprints", "\(fingerprint) is not a SHA-256 fingerprint (64 hex digits)")
                }
                if let owner = fingerprintOwners.updateValue(name, forKey: fingerprint) {
                    throw ConfigurationError(key: prefix + "fingerprints", "\(fingerprint) also belongs to tenant \(owner)")
                }
            }
            let rule = TenantRule(
                name: name,
                fingerprints: Set(fingerprints),
                userID: settings.string(prefix + "uid"),
                topic: settings.string(prefix + "topic"),
                environment: try settings.string(prefix + "environment").map { _ in
                    try settings.choice(prefix + "environment", default: defaultEnvironment, Self.environments)
                },
                credentials: settings.string(prefix + "credentials"),
                channels: try Self.loadChannels(tenant: name, settings)
            )
            if let topic = rule.topic, !Tenant.isValidTopic(topic) {
                throw ConfigurationError(
                    key: prefix + "topic",
                    "\(String(reflecting: topic)) is not an APNs topic (a bundle id: letters, digits, hyphens and dots, with an optional push-type suffix)"
                )
            }
            guard rule.userID != nil || !rule.fingerprints.isEmpty else {
                throw ConfigurationError(key: prefix + "uid", "tenant \(name) matches no certificate: give its uid or fingerprints")
            }
            if let userID = rule.userID, let other = rules.first(where: { $0.userID == userID }) {
                throw ConfigurationError(key: prefix + "uid", "\(userID) is also the uid of tenant \(other.name)")
            }
            if let credential = rule.credentials, credentials[credential] == nil {
                throw ConfigurationError(key: prefix + "credentials", "\"\(credential)\" is not listed in credentials")
            }
            rules.append(rule)
        }
        let acceptsUnlisted = try settings.bool("acceptUnlistedCertificates", default: rules.isEmpty)
        let tenants = ConfiguredTenantResolver(rules: rules, defaultEnvironment: defaultEnvironment, acceptsUnlistedCertificates: acceptsUnlisted)
        if tls.clientCertificateAuthorities.isEmpty, tls.pinnedFingerprints.isEmpty, tenants.pinnedFingerprints.isEmpty {
            throw ConfigurationError(key: "tls.clientCA", "no way to trust a provider: give client CA bundle(s), pinned fingerprints or tenant fingerprints")
        }

        // Listeners and limits.
        var gateway = GatewayConfiguration(tls: tls)
        let gatewayAddress = try settings.address("gateway.listen", default: "0.0.0.0:2195")!
        gateway.host = gatewayAddress.host
        gateway.port = gatewayAddress.port
        gateway.maximumConnections = try settings.int("gateway.maximumConnections", default: 10_000, range: 1...1_000_000)
        gateway.maximumHandshakes = try settings.int("gateway.maximumHandshakes", default: 512, range: 1...1_000_000)
        gateway.maximumHandshakesPerAddress = try settings.int("gateway.maximumHandshakesPerAddress", default: 64, range: 1...1_000_000)
        gateway.session.maximumInFlight = try settings.int("gateway.maximumInFlight", default: 256, range: 1...100_000)
        gateway.handshakeTimeout = .init(try settings.seconds("gateway.handshakeTimeoutSeconds", default: 10, range: 0.1...600))
        let idle = try settings.seconds("gateway.idleTimeoutSeconds", default: 3600, range: 0...864_000)
        gateway.idleTimeout = idle == .zero ? nil : .init(idle)
        gateway.shutdownGracePeriod = .init(try settings.seconds("gateway.shutdownGraceSeconds", default: 10, range: 0...600))

        var feedback = FeedbackConfiguration(tls: tls)
        let feedbackAddress = try settings.address("feedback.listen", default: "0.0.0.0:2196")!
        feedback.host = feedbackAddress.host
        feedback.port = feedbackAddress.port
        feedback.maximumConnections = try settings.int("feedback.maximumConnections", default: 1000, range: 1...1_000_000)
        feedback.maximumHandshakes = try settings.int("feedback.maximumHandshakes", default: 256, range: 1...1_000_000)
        feedback.maximumHandshakesPerAddress = try settings.int("feedback.maximumHandshakesPerAddress", default: 32, range: 1...1_000_000)
        feedback.writeTimeout = .init(try settings.seconds("feedback.writeTimeoutSeconds", default: 60, range: 1...3600))
        feedback.drain.only32ByteTokens = try settings.bool("feedback.only32ByteTokens", default: false)

        // Upstream.
        var upstream = APNsNotificationUpstream.Configuration()
        let trustRoots: NIOSSLTrustRoots? = try settings.file("upstream.ca").map { path in
            do {
                return .certificates(try NIOSSLCertificate.fromPEMFile(path))
            } catch {
                throw ConfigurationError(key: "upstream.ca", "\(path) holds no PEM certificate: \(error)")
            }
        }
        let serverName = settings.string("upstream.serverName")
        // The broadcast and channel management hosts default to Apple's; when the device host of
        // an environment is set (a mock, a proxy), they default to that address too.
        func endpoint(_ key: String, orSetKey fallbackKey: String?, standard: APNsEndpoint) throws -> APNsEndpoint {
            guard let key = settings.string(key) != nil ? key : fallbackKey.flatMap({ settings.string($0) != nil ? $0 : nil }) else {
                return standard
            }
            let address = try settings.address(key, default: "")!
            return APNsEndpoint(host: address.host, port: address.port, serverHostname: serverName, trustRoots: trustRoots)
        }
        var channelManagement: [APNsEnvironment: APNsEndpoint] = [:]
        for (environment, name, standard, broadcast, management) in [
            (APNsEnvironment.production, "production", APNsEndpoint.production, APNsEndpoint.broadcastProduction, APNsEndpoint.channelManagementProduction),
            (APNsEnvironment.sandbox, "sandbox", APNsEndpoint.sandbox, APNsEndpoint.broadcastSandbox, APNsEndpoint.channelManagementSandbox),
        ] {
            upstream.endpoints[environment] = try endpoint("upstream.\(name)", orSetKey: nil, standard: standard)
            upstream.broadcastEndpoints[environment] = try endpoint("upstream.broadcast.\(name)", orSetKey: "upstream.\(name)", standard: broadcast)
            channelManagement[environment] = try endpoint("upstream.channels.\(name)", orSetKey: "upstream.\(name)", standard: management)
        }
        upstream.client.connectionsPerPool = try settings.int("upstream.connectionsPerPool", default: 2, range: 1...64)
        upstream.client.maximumStreamsPerConnection = try settings.int("upstream.maximumStreamsPerConnection", default: 1000, range: 1...100_000)
        upstream.client.connectTimeout = .init(try settings.seconds("upstream.connectTimeoutSeconds", default: 10, range: 0.1...600))
        upstream.client.pingInterval = .init(try settings.seconds("upstream.pingIntervalSeconds", default: 60, range: 1...3600))
        upstream.client.retryBudget = .init(try settings.seconds("upstream.retryBudgetSeconds", default: 30, range: 0...3600))
        upstream.client.requestTimeout = .init(try settings.seconds("upstream.requestTimeoutSeconds", default: 10, range: 0.1...600))
        upstream.client.maximumQueuedRequests = try settings.int("upstream.maximumQueuedRequests", default: 100_000, range: 1...10_000_000)
        upstream.client.engine = try Self.engine(settings)

        // Store.
        let storeLocation = settings.string("store.url", default: "sqlite:apns-bridge.sqlite")
        guard storeLocation.hasPrefix("sqlite:") || storeLocation.hasPrefix("postgres://") || storeLocation.hasPrefix("postgresql://") else {
            throw ConfigurationError(key: "store.url", "expected sqlite:PATH or postgres://user:password@host:port/database")
        }
        try Self.checkStoreLocation(storeLocation)
        var store = BridgeStoreConfiguration()
        store.feedbackRetention = try settings.seconds("feedback.retentionDays", default: 30, range: 0.001...3650, unit: "days", secondsPerUnit: 86_400)
        store.resendRecordWindow = try settings.seconds("store.resendWindowSeconds", default: 120, range: 1...86_400)
        store.sqliteSynchronous = try settings.choice("store.sqliteSynchronous", default: .full, ["full": .full, "normal": .normal])
        store.usageRetention = try settings.seconds("usage.retentionDays", default: 400, range: 1...3650, unit: "days", secondsPerUnit: 86_400)

        let admin = try settings.address("admin.listen", default: "127.0.0.1:9180", allowOff: true)

        return BridgeSettings(
            logLevel: logLevel,
            logFormat: logFormat,
            gateway: gateway,
            feedback: feedback,
            tlsFiles: tlsFiles,
            watchInterval: watchInterval,
            tenants: tenants,
            credentials: credentials,
            defaultCredentials: defaultCredentials,
            upstream: upstream,
            channelManagementEndpoints: channelManagement,
            storeLocation: storeLocation,
            store: store,
            admin: admin,
            values: settings.requestedValues
        )
    }

    /// A tenant's Live Activity channels (`tenant.NAME.channels` and `tenant.NAME.channel.CHANNEL.*`).
    static func loadChannels(tenant: String, _ settings: SettingsReader) throws -> BroadcastChannels {
        var channels: [BroadcastChannel] = []
        var owners: (ids: [String: String], tokens: [ByteBuffer: String]) = ([:], [:])
        for name in try settings.names("tenant.\(tenant).channels") {
            let prefix = "tenant.\(tenant).channel.\(name)."
            guard let id = settings.string(prefix + "id") else {
                throw ConfigurationError(key: prefix + "id", "channel \(name) has no id: give the channel id APNs issued (apns-bridge channels create makes one)")
            }
            guard ChannelToken.isValidChannelID(id) else {
                throw ConfigurationError(key: prefix + "id", "\"\(id)\" is not a channel id (base64, as APNs issues it)")
            }
            let token: ByteBuffer
            if let text = settings.string(prefix + "token") {
                guard let parsed = ChannelToken.parse(hex: text) else {
                    throw ConfigurationError(key: prefix + "token", "not a channel token: 64 hex digits (32 bytes), like a device token")
                }
                token = parsed
            } else {
                token = ChannelToken.derive(tenant: tenant, channelID: id)
            }
            var storesMessages: Bool?
            if settings.string(prefix + "messageStoragePolicy") != nil {
                storesMessages = try settings.int(prefix + "messageStoragePolicy", default: 1, range: 0...1) == 1
            }
            if let other = owners.ids.updateValue(name, forKey: id) {
                throw ConfigurationError(key: prefix + "id", "channel \(other) of tenant \(tenant) has the same id")
            }
            if let other = owners.tokens.updateValue(name, forKey: token) {
                throw ConfigurationError(key: prefix + "token", "channel \(other) of tenant \(tenant) has the same channel token")
            }
            channels.append(BroadcastChannel(name: name, id: id, token: token, storesMessages: storesMessages))
        }
        return BroadcastChannels(channels)
    }

    /// The keys a reload applies to the running bridge; a change of any other key is reported
    /// as needing a restart (listeners, limits, the store, the upstream connections' settings).
    public static func isLive(_ key: String) -> Bool {
        let liveKeys: Set<String> = [
            "log.level", "environment", "acceptUnlistedCertificates", "defaultCredentials", "credentials", "tenants",
            "tls.certificate", "tls.privateKey", "tls.clientCA", "tls.pinnedFingerprints", "tls.allowTLS13", "tls.allowLegacyTLS",
        ]
        return liveKeys.contains(key) || key.hasPrefix("tenant.") || key.hasPrefix("credential.")
    }

    /// The keys whose values differ between `self` and `other` (set, unset or changed).
    public func changedKeys(comparedWith other: BridgeSettings) -> [String] {
        Set(self.values.keys).union(other.values.keys).filter { key in
            (self.values[key] ?? nil) != (other.values[key] ?? nil)
        }.sorted()
    }

    /// Every key without a name in it (docs/configuration.md lists them all).
    public static let fixedKeys: Set<String> = [
        "log.level", "log.format", "environment", "acceptUnlistedCertificates", "defaultCredentials", "credentials", "tenants",
        "gateway.listen", "gateway.maximumConnections", "gateway.maximumHandshakes", "gateway.maximumHandshakesPerAddress",
        "gateway.maximumInFlight", "gateway.handshakeTimeoutSeconds", "gateway.idleTimeoutSeconds", "gateway.shutdownGraceSeconds",
        "feedback.listen", "feedback.maximumConnections", "feedback.maximumHandshakes", "feedback.maximumHandshakesPerAddress",
        "feedback.writeTimeoutSeconds", "feedback.only32ByteTokens", "feedback.retentionDays",
        "tls.certificate", "tls.privateKey", "tls.clientCA", "tls.pinnedFingerprints", "tls.allowTLS13", "tls.allowLegacyTLS",
        "tls.reloadIntervalSeconds", "reload.watchIntervalSeconds",
        "upstream.production", "upstream.sandbox", "upstream.broadcast.production", "upstream.broadcast.sandbox",
        "upstream.channels.production", "upstream.channels.sandbox", "upstream.ca", "upstream.serverName", "upstream.connectionsPerPool",
        "upstream.maximumStreamsPerConnection", "upstream.connectTimeoutSeconds", "upstream.pingIntervalSeconds",
        "upstream.retryBudgetSeconds", "upstream.requestTimeoutSeconds", "upstream.maximumQueuedRequests", "upstream.http2Engine",
        "store.url", "store.resendWindowSeconds", "store.sqliteSynchronous", "usage.retentionDays",
        "admin.listen",
    ]

    /// The keys of one tenant and of one set of credentials, after `tenant.NAME.` and
    /// `credential.NAME.`.
    public static let tenantKeys: Set<String> = ["uid", "topic", "environment", "credentials", "fingerprints", "channels"]
    /// The keys of one channel of a tenant, after `tenant.NAME.channel.CHANNEL.`.
    public static let channelKeys: Set<String> = ["id", "token", "messageStoragePolicy"]
    public static let credentialKeys: Set<String> = ["keyFile", "keyId", "teamId", "certificate", "privateKey", "pkcs12", "pkcs12Password"]

    /// Every valid key, for the tenants and credentials the settings list.
    public static func knownKeys(tenants: [String], credentials: [String], channels: [String: [String]] = [:]) -> Set<String> {
        var keys = Self.fixedKeys
        for name in tenants { keys.formUnion(Self.tenantKeys.map { "tenant.\(name).\($0)" }) }
        for (tenant, names) in channels {
            for name in names { keys.formUnion(Self.channelKeys.map { "tenant.\(tenant).channel.\(name).\($0)" }) }
        }
        for name in credentials { keys.formUnion(Self.credentialKeys.map { "credential.\(name).\($0)" }) }
        return keys
    }

    /// A key in the file or the flags that the bridge does not know is a mistake (a typo, or a
    /// tenant not listed in `tenants`): refused, naming the nearest known key.
    private static func rejectUnknownKeys(_ settings: SettingsReader) throws {
        let tenants = try settings.names("tenants")
        var channels: [String: [String]] = [:]
        for tenant in tenants {
            channels[tenant] = try settings.names("tenant.\(tenant).channels")
        }
        let known = Self.knownKeys(tenants: tenants, credentials: try settings.names("credentials"), channels: channels)
        guard let unknown = settings.unknownKeys(known: known).first else { return }
        var message = "not a configuration key"
        let parts = unknown.key.split(separator: ".").map(String.init)
        if parts.count == 3, parts[0] == "tenant", Self.tenantKeys.contains(parts[2]) {
            message += "; tenant \(parts[1]) is not listed in tenants"
        } else if parts.count == 3, parts[0] == "credential", Self.credentialKeys.contains(parts[2]) {
            message += "; credentials \(parts[1]) are not listed in credentials"
        } else if let nearest = unknown.nearest {
            message += "; did you mean \(nearest)?"
        }
        throw ConfigurationError(key: unknown.key, message + " (docs/configuration.md lists every key)")
    }

    static let environments: [String: APNsEnvironment] = [
        "production": .production, "sandbox": .sandbox, "development": .sandbox,
    ]

    /// Reads the listeners' certificate, key and client CAs (at start-up and on reload).
    public static func loadTLS(_ files: TLSFiles) throws -> LegacyTLSConfiguration {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(files.certificate)
        } catch {
            throw ConfigurationError(key: "tls.certificate", "\(files.certificate) holds no PEM certificate: \(error)")
        }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: files.privateKey, format: .pem)
        } catch {
            throw ConfigurationError(key: "tls.privateKey", "\(files.privateKey) holds no PEM private key")
        }
        var authorities: [NIOSSLCertificate] = []
        for path in files.clientCAs {
            do {
                authorities += try NIOSSLCertificate.fromPEMFile(path)
            } catch {
                throw ConfigurationError(key: "tls.clientCA", "\(path) holds no PEM certificate: \(error)")
            }
        }
        let configuration = LegacyTLSConfiguration(certificateChain: chain, privateKey: key, clientCertificateAuthorities: authorities)
        do {
            // What the listeners do at start: BoringSSL checks that the key is the certificate's.
            _ = try configuration.makeServerContext()
        } catch {
            throw ConfigurationError(key: "tls.privateKey", "\(files.privateKey) is not the private key of \(files.certificate) (\(error))")
        }
        return configuration
    }

    /// The files the settings name (listener TLS, upstream credentials): a reload notices when
    /// their contents change.
    public var namedFiles: [String] {
        var files = [self.tlsFiles.certificate, self.tlsFiles.privateKey] + self.tlsFiles.clientCAs
        for source in self.credentials.values {
            files += source.files
        }
        return files
    }

    private static func loadCredential(_ name: String, _ settings: SettingsReader) throws -> CredentialSource {
        let prefix = "credential.\(name)."
        if let keyFile = try settings.file(prefix + "keyFile") {
            guard let keyID = settings.string(prefix + "keyId") else {
                throw ConfigurationError(key: prefix + "keyId", "missing: the key id of \(keyFile) (10 characters, from the Apple developer account)")
            }
            guard Self.isAppleIdentifier(keyID) else {
                throw ConfigurationError(key: prefix + "keyId", "\"\(keyID)\" is not a key id: 10 letters and digits, as the Apple developer account shows it (the AuthKey_KEYID.p8 file name)")
            }
            guard let teamID = settings.string(prefix + "teamId") else {
                throw ConfigurationError(key: prefix + "teamId", "missing: the team id that owns \(keyFile)")
            }
            guard Self.isAppleIdentifier(teamID) else {
                throw ConfigurationError(key: prefix + "teamId", "\"\(teamID)\" is not a team id: 10 letters and digits")
            }
            do {
                _ = try P256.Signing.PrivateKey(pemRepresentation: try String(contentsOfFile: keyFile, encoding: .utf8))
            } catch {
                throw ConfigurationError(key: prefix + "keyFile", "\(keyFile) is not a PEM (.p8) P-256 private key")
            }
            return .signingKey(keyFile: keyFile, keyID: keyID, teamID: teamID)
        }
        if let certificate = try settings.file(prefix + "certificate") {
            let key = try settings.requiredFile(prefix + "privateKey", why: "the PEM private key of \(certificate)")
            let credentials: APNsCredentials
            do {
                credentials = try APNsCredentials.certificate(pemCertificateFile: certificate, pemKeyFile: key)
            } catch {
                throw ConfigurationError(key: prefix + "certificate", "\(certificate) and \(key) are not a PEM certificate and key: \(error)")
            }
            guard Self.keyMatchesCertificate(credentials) else {
                throw ConfigurationError(key: prefix + "privateKey", "\(key) is not the private key of \(certificate)")
            }
            return .certificate(certificateFile: certificate, privateKeyFile: key)
        }
        if let file = try settings.file(prefix + "pkcs12") {
            let passphrase = settings.string(prefix + "pkcs12Password", secret: true)
            let credentials: APNsCredentials
            do {
                credentials = try APNsCredentials.certificate(pkcs12File: file, passphrase: passphrase)
            } catch {
                throw ConfigurationError(key: prefix + "pkcs12", "\(file) cannot be opened (wrong pkcs12Password, or not PKCS#12)")
            }
            guard Self.keyMatchesCertificate(credentials) else {
                throw ConfigurationError(key: prefix + "pkcs12", "the private key in \(file) is not its certificate's")
            }
            return .pkcs12(file: file, passphrase: passphrase)
        }
        throw ConfigurationError(key: prefix + "keyFile", "credentials \(name) need keyFile + keyId + teamId, certificate + privateKey, or pkcs12")
    }

    /// Apple's key and team ids: 10 ASCII letters and digits.
    static func isAppleIdentifier(_ text: String) -> Bool {
        text.count == 10 && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) }
    }

    /// Whether a client TLS context can be made from the certificate and key, as the upstream
    /// client will at start (BoringSSL refuses a key that is not the certificate's).
    static func keyMatchesCertificate(_ credentials: APNsCredentials) -> Bool {
        guard case .certificate(let chain, let key) = credentials else { return true }
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateChain = chain.map { .certificate($0) }
        tls.privateKey = .privateKey(key)
        return (try? NIOSSLContext(configuration: tls)) != nil
    }

    /// `upstream.http2Engine`: `auto` (libnghttp2 when the build has it), `nio` or `nghttp2`; the
    /// latter only in a build with the `NGHTTP2Engine` trait.
    static func engine(_ settings: SettingsReader) throws -> APNsHTTP2Engine {
        let chosen: APNsHTTP2Engine? = try settings.choice(
            "upstream.http2Engine",
            default: nil,
            ["auto": nil, "nio": .nio, "nghttp2": .nghttp2]
        )
        guard let chosen else { return .preferred }
        guard chosen.isAvailable else {
            throw ConfigurationError(
                key: "upstream.http2Engine",
                "this build has no libnghttp2 engine: build with `swift build -c release --traits NGHTTP2Engine` (Debian package libnghttp2-dev), or choose nio or auto"
            )
        }
        return chosen
    }

    /// `sqlite:PATH` must name a file that can be created or opened as a database; a
    /// PostgreSQL URL must parse. Checked before anything is opened or bound.
    static func checkStoreLocation(_ location: String) throws {
        if location.hasPrefix("sqlite:") {
            let path = String(location.dropFirst("sqlite:".count))
            guard !path.isEmpty else { throw ConfigurationError(key: "store.url", "sqlite: needs a file path") }
            let directory = (path as NSString).deletingLastPathComponent.isEmpty ? "." : (path as NSString).deletingLastPathComponent
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
                throw ConfigurationError(key: "store.url", "the folder \(directory) of \(path) does not exist")
            }
            // SQLite writes its journal beside the file: a file must be creatable there. Asking
            // for write permission is not enough (root may write to /proc, where nothing can be
            // created), so a probe file is created and removed at once.
            let probe = (directory as NSString).appendingPathComponent(".apns-bridge-check-\(UUID().uuidString)")
            guard FileManager.default.createFile(atPath: probe, contents: nil) else {
                throw ConfigurationError(
                    key: "store.url",
                    "cannot create files in the folder \(directory) of \(path) (not writable, or a read-only or special file system); SQLite writes its journal beside the file"
                )
            }
            try? FileManager.default.removeItem(atPath: probe)
            if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
                guard !isDirectory.boolValue else { throw ConfigurationError(key: "store.url", "\(path) is a folder, not a database file") }
                let type = (try? FileManager.default.attributesOfItem(atPath: (path as NSString).resolvingSymlinksInPath))?[.type] as? FileAttributeType
                guard type == .typeRegular else {
                    throw ConfigurationError(key: "store.url", "\(path) is not a regular file (a device, a pipe or a socket cannot hold the database)")
                }
                guard let handle = FileHandle(forReadingAtPath: path) else {
                    throw ConfigurationError(key: "store.url", "cannot read \(path)")
                }
                defer { try? handle.close() }
                let header = (try? handle.read(upToCount: 16)) ?? Data()
                if !header.isEmpty, header != Data("SQLite format 3\0".utf8) {
                    throw ConfigurationError(key: "store.url", "\(path) exists and is not an SQLite database")
                }
            }
        } else {
            do {
                _ = try PostgresBridgeStore.clientConfiguration(url: location)
            } catch {
                throw ConfigurationError(key: "store.url", "\(BridgeStoreLocation.redacted(location)): \(error)")
            }
        }
    }

    /// Opens the credentials: signing keys become provider-token sources (one per key, shared by
    /// its connections).
    public func makeCredentials(logger: Logger) throws -> [String: APNsCredentials] {
        try self.credentials.mapValues { source in
            switch source {
            case .signingKey(let keyFile, let keyID, let teamID):
                let key = try P256.Signing.PrivateKey(pemRepresentation: try String(contentsOfFile: keyFile, encoding: .utf8))
                return .token(ProviderTokenSource(signer: ProviderTokenSigner(key: key, keyID: keyID, teamID: teamID), logger: logger))
            case .certificate(let certificate, let key):
                return try .certificate(pemCertificateFile: certificate, pemKeyFile: key)
            case .pkcs12(let file, let passphrase):
                return try .certificate(pkcs12File: file, passphrase: passphrase)
            }
        }
    }
}

import BridgeCore
import BridgeForwarding
import BridgeServer
import BridgeStores
import Crypto
import Foundation
import Logging
import NIOCore
import NIOSSL
import UpstreamAPNs

/// Everything `apns-bridge serve` runs with, resolved and checked: files read, names
/// cross-checked, defaults applied. ``ConfigurationKey/schema`` lists every key, and
/// docs/configuration.md describes each. Reading is split by job: the listeners and their TLS
/// (BridgeSettings+Listeners), credentials, tenants, upstream, store, and the key checks.
package struct BridgeSettings: Sendable {
    /// Upstream credentials as configured; the secrets themselves stay in their files until
    /// ``makeCredentials(logger:)``.
    package enum CredentialSource: Sendable, Equatable {
        case signingKey(keyFile: String, keyID: String, teamID: String)
        case certificate(certificateFile: String, privateKeyFile: String)
        case pkcs12(file: String, passphrase: String?)

        /// The files holding the secret (and certificate).
        package var files: [String] {
            switch self {
            case .signingKey(let file, _, _): [file]
            case .certificate(let certificate, let key): [certificate, key]
            case .pkcs12(let file, _): [file]
            }
        }

        package var summary: String {
            switch self {
            case .signingKey(let file, let keyID, let teamID): "signing key \(keyID) of team \(teamID) (\(file))"
            case .certificate(let certificate, _): "certificate \(certificate)"
            case .pkcs12(let file, _): "PKCS#12 \(file)"
            }
        }
    }

    /// The files of the legacy listeners' TLS.
    package struct TLSFiles: Sendable, Equatable {
        package var certificate: String
        package var privateKey: String
        package var clientCAs: [String]
    }

    package var logLevel: Logger.Level
    package var logFormat: LogFormat
    package var gateway: GatewayConfiguration
    package var feedback: FeedbackConfiguration
    package var tlsFiles: TLSFiles
    /// How often the configuration file and the files it names are checked for changes, which
    /// are then reloaded (as on SIGHUP); `nil`: only on SIGHUP or `apns-bridge reload`.
    package var watchInterval: Duration?
    package var tenants: ConfiguredTenantResolver
    package var credentials: [String: CredentialSource]
    package var defaultCredentials: String
    package var upstream: APNsForwarder.Configuration
    /// Where `apns-bridge channels` reaches each environment's channel management API.
    package var channelManagementEndpoints: [APNsEnvironment: APNsEndpoint]
    package var storeLocation: String
    package var store: BridgeStoreConfiguration
    package var admin: (host: String, port: Int)?
    /// The push log's size (0: off) and whether it keeps whole tokens (docs/operations.md#did-it-go).
    package var pushLog: (entries: Int, fullTokens: Bool)
    /// Every key read, with its value as text (`nil`: not set), to tell what a reload changes.
    package var values: [String: String?]

    /// Reads, checks and resolves the settings; a ``ConfigurationError`` names the first key
    /// that cannot be used.
    package static func load(from settings: SettingsReader) throws -> BridgeSettings {
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
            .logLevel,
            default: Logger.Level.info,
            Dictionary(uniqueKeysWithValues: Logger.Level.allCases.map { ($0.rawValue, $0) })
        )
        let logFormat = try settings.choice(.logFormat, default: LogFormat.text, ["text": .text, "json": .json])
        let defaultEnvironment = try settings.choice(
            .environment,
            default: APNsEnvironment.production,
            Self.environments
        )

        let (tlsFiles, tls) = try Self.readListenerTLS(settings)
        let watchInterval = try Self.readWatchInterval(settings)
        let (credentials, defaultCredentials) = try Self.readCredentials(settings)
        let tenants = try Self.readTenants(settings, credentials: credentials, defaultEnvironment: defaultEnvironment)
        if tls.clientCertificateAuthorities.isEmpty, tls.pinnedFingerprints.isEmpty, tenants.pinnedFingerprints.isEmpty
        {
            throw ConfigurationError(
                key: "tls.clientCA",
                "no way to trust a provider: give client CA bundle(s), pinned fingerprints or tenant fingerprints"
            )
        }
        let gateway = try Self.readGateway(settings, tls: tls)
        let feedback = try Self.readFeedback(settings, tls: tls)
        let (upstream, channelManagement) = try Self.readUpstream(settings)
        let (storeLocation, store) = try Self.readStore(settings)
        let admin = try settings.address(.adminListen, default: "127.0.0.1:9180")
        let pushLog = (
            entries: try settings.int(.pushLogEntries, default: 100_000),
            fullTokens: try settings.bool(.pushLogFullTokens, default: false)
        )

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
            pushLog: pushLog,
            values: settings.requestedValues
        )
    }

    static let environments: [String: APNsEnvironment] = [
        "production": .production, "sandbox": .sandbox, "development": .sandbox,
    ]

    /// The files the settings name (listener TLS, upstream credentials): a reload notices when
    /// their contents change.
    package var namedFiles: [String] {
        var files = [self.tlsFiles.certificate, self.tlsFiles.privateKey] + self.tlsFiles.clientCAs
        for source in self.credentials.values {
            files += source.files
        }
        return files
    }
}

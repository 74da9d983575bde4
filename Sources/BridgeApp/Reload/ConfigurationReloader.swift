import BridgeCore
import BridgeForwarding
import BridgeServer
import CoreMetrics
import Crypto
import Foundation
import Logging
import UpstreamAPNs

/// Reads the configuration again (on SIGHUP, `apns-bridge reload`, or a watched file changing),
/// checks it completely, and applies what can change while the bridge runs:
///
/// - tenants added, changed or removed (new handshakes use the new ones; the open connections
///   of a removed tenant get status 10 and close, after their notifications in flight);
/// - upstream credentials added, replaced (a new `.p8` key or certificate, also at the same
///   path) or removed: notifications in flight finish on the client they started on;
/// - the legacy listeners' certificate, key, client CAs, pinned fingerprints and TLS versions
///   (for new handshakes);
/// - the log level.
///
/// A configuration that fails any check is refused with one log line naming the key, and the
/// running one stays. Other keys (listeners, limits, the store, the upstream connections'
/// settings) are reported as needing a restart. Reloads run one at a time.
package actor ConfigurationReloader {
    /// `nil`: the bridge was given its settings directly (the demo, tests); a reload is refused.
    private let source: SettingsSource?
    private let started: BridgeSettings
    private var running: BridgeSettings
    /// SHA-256 of each named file's contents, as last applied.
    private var fileDigests: [String: String]
    private let tenants: ReloadableTenantResolver
    private let tls: LegacyTLSContext
    private let forwarder: ReloadableForwarder
    /// The gateway, once its service has bound it (``gatewayListening(_:)``): a reload reviews
    /// its open connections.
    private var gateway: GatewayServer?
    private let logLevel: LiveLogLevel?
    private let makeClient: @Sendable (String, APNsCredentials) throws -> APNsForwarder
    private let logger: Logger
    /// The expiry dates of the certificates in use, updated by every reload.
    private let expiry: CertificateExpiry

    // Made with the reloader, so the series exist (at zero; the last reload "successful" until
    // one is refused) before the first reload.
    private let applied: Counter
    private let refused: Counter
    private let lastSucceeded: CoreMetrics.Gauge
    /// Reloads take turns: being an actor is not enough, since a reload awaits (reading the
    /// file, reviewing the open connections), and a second one (a SIGHUP while the file watch
    /// fires) would otherwise start meanwhile and compare against a half-applied configuration.
    private let reloads = AsyncSerialLock()

    init(
        source: SettingsSource?,
        settings: BridgeSettings,
        tenants: ReloadableTenantResolver,
        tls: LegacyTLSContext,
        forwarder: ReloadableForwarder,
        logLevel: LiveLogLevel?,
        makeClient: @escaping @Sendable (String, APNsCredentials) throws -> APNsForwarder,
        expiry: CertificateExpiry,
        metricsFactory: any MetricsFactory = MetricsSystem.factory,
        logger: Logger
    ) {
        self.source = source
        self.started = settings
        self.running = settings
        self.fileDigests = Self.digests(of: settings.namedFiles)
        self.tenants = tenants
        self.tls = tls
        self.forwarder = forwarder
        self.logLevel = logLevel
        self.makeClient = makeClient
        self.logger = logger
        self.expiry = expiry
        self.applied = Counter(
            label: "apns_bridge_config_reloads_total",
            dimensions: [("result", "applied")],
            factory: metricsFactory
        )
        self.refused = Counter(
            label: "apns_bridge_config_reloads_total",
            dimensions: [("result", "refused")],
            factory: metricsFactory
        )
        self.lastSucceeded = CoreMetrics.Gauge(
            label: "apns_bridge_config_last_reload_successful",
            factory: metricsFactory
        )
        self.lastSucceeded.record(1)
    }

    /// The gateway's service has bound it: from now on a reload reviews its open connections.
    func gatewayListening(_ gateway: GatewayServer) {
        self.gateway = gateway
    }

    /// The settings in force (for keys that need a restart, the values the bridge started with
    /// still apply).
    package var settings: BridgeSettings {
        self.running
    }

    /// Reloads once the reload before has finished. `trigger` names what asked (`SIGHUP`,
    /// `admin`, `watch`) in the log.
    @discardableResult
    package func reload(trigger: String) async -> ReloadOutcome {
        await self.reloads.withLock {
            await self.reloadNow(trigger: trigger)
        }
    }

    private func reloadNow(trigger: String) async -> ReloadOutcome {
        var logger = self.logger
        logger[metadataKey: "trigger"] = "\(trigger)"
        do {
            let outcome = try await self.apply()
            self.applied.increment()
            self.lastSucceeded.record(1)
            if outcome.applied.isEmpty {
                logger.info("configuration reloaded: no changes")
            } else {
                logger.info(
                    "configuration reloaded",
                    metadata: ["changes": "\(outcome.applied.joined(separator: "; "))"]
                )
            }
            if !outcome.needsRestart.isEmpty {
                logger.warning(
                    "changed settings that apply only at restart",
                    metadata: ["keys": "\(outcome.needsRestart.joined(separator: ", "))"]
                )
            }
            return outcome
        } catch {
            let refusal = error as? ConfigurationError ?? ConfigurationError.configurationFile("\(error)")
            self.refused.increment()
            self.lastSucceeded.record(0)
            logger.error(
                "configuration reload refused; the running configuration stays",
                metadata: ["key": "\(refusal.key)", "error": "\(refusal.message)"]
            )
            return ReloadOutcome(refused: refusal)
        }
    }

    private func apply() async throws -> ReloadOutcome {
        guard let source = self.source else {
            throw ConfigurationError(
                key: "--config",
                "this bridge was started with settings given in code; there is nothing to read again"
            )
        }
        let next = try await source.load()
        let nextDigests = Self.digests(of: next.namedFiles)
        var outcome = ReloadOutcome()
        outcome.needsRestart = next.changedKeys(comparedWith: self.started).filter { !BridgeSettings.isLive($0) }

        // Everything that can fail is prepared before anything changes.
        let changedFiles = Set(next.namedFiles.filter { nextDigests[$0] != self.fileDigests[$0] })
        let replacedCredentials = next.credentials.filter { name, source in
            self.running.credentials[name] != source || source.files.contains(where: changedFiles.contains)
        }.keys.sorted()
        let removedCredentials = Set(self.running.credentials.keys).subtracting(next.credentials.keys)
        var opened: [String: APNsCredentials] = [:]
        var clients: [String: APNsForwarder] = [:]
        do {
            let credentials = try next.makeCredentials(logger: self.logger)
            for name in replacedCredentials {
                opened[name] = credentials[name]
                clients[name] = try self.makeClient(name, credentials[name]!)
            }
        } catch {
            for client in clients.values { client.shutdown() }
            throw error as? ConfigurationError
                ?? ConfigurationError(.credentials, "cannot open the upstream credentials: \(error)")
        }
        let tlsChanged =
            next.changedKeys(comparedWith: self.running).contains { $0.hasPrefix("tls.") }
            || [next.tlsFiles.certificate, next.tlsFiles.privateKey].contains(where: changedFiles.contains)
            || next.tlsFiles.clientCAs.contains(where: changedFiles.contains)

        // Apply: tenants and TLS first (new handshakes), then the review of open connections,
        // then the upstream clients (a connection being closed forwards nothing new by then).
        let previousTenants = self.tenants.current
        self.tenants.replace(with: next.tenants)
        do {
            try self.tls.reload(next.gateway.tls)
        } catch {
            self.tenants.replace(with: previousTenants)
            for client in clients.values { client.shutdown() }
            throw ConfigurationError(.tlsCertificate, "cannot use the new TLS settings: \(error)")
        }
        outcome.applied += Self.tenantChanges(from: previousTenants, to: next.tenants)
        if tlsChanged {
            outcome.applied.append("legacy listener TLS replaced (new handshakes)")
        }
        await self.gateway?.reviewTenants(credentials: Set(next.credentials.keys))
        self.forwarder.update(
            replacing: clients,
            removing: removedCredentials,
            defaultCredentials: next.defaultCredentials
        )
        if !replacedCredentials.isEmpty {
            outcome.applied.append("credentials opened: \(replacedCredentials.joined(separator: ", "))")
        }
        if !removedCredentials.isEmpty {
            outcome.applied.append("credentials removed: \(removedCredentials.sorted().joined(separator: ", "))")
        }
        if self.running.defaultCredentials != next.defaultCredentials {
            outcome.applied.append("default credentials: \(next.defaultCredentials)")
        }
        if let logLevel = self.logLevel, logLevel.current != next.logLevel {
            logLevel.current = next.logLevel
            outcome.applied.append("log level: \(next.logLevel)")
        }
        var expiries = CertificateExpiry.dates(next, credentials: opened)
        for (name, date) in self.expiry.dates where name.hasPrefix("credential.") && expiries[name] == nil {
            let credential = String(name.dropFirst("credential.".count))
            if next.credentials[credential] != nil, !replacedCredentials.contains(credential) {
                expiries[name] = date  // credentials kept as they were
            }
        }
        self.expiry.update(expiries)

        self.running = next
        self.fileDigests = nextDigests
        return outcome
    }

    private static func tenantChanges(from old: ConfiguredTenantResolver, to new: ConfiguredTenantResolver) -> [String]
    {
        let oldRules = Dictionary(old.rules.map { ($0.name, $0) }) { first, _ in first }
        let newRules = Dictionary(new.rules.map { ($0.name, $0) }) { first, _ in first }
        var changes: [String] = []
        let added = newRules.keys.filter { oldRules[$0] == nil }.sorted()
        let removed = oldRules.keys.filter { newRules[$0] == nil }.sorted()
        let changed = newRules.keys.filter { oldRules[$0] != nil && oldRules[$0] != newRules[$0] }.sorted()
        if !added.isEmpty { changes.append("tenants added: \(added.joined(separator: ", "))") }
        if !removed.isEmpty { changes.append("tenants removed: \(removed.joined(separator: ", "))") }
        if !changed.isEmpty { changes.append("tenants changed: \(changed.joined(separator: ", "))") }
        if old.defaultEnvironment != new.defaultEnvironment {
            changes.append("default environment: \(new.defaultEnvironment.rawValue)")
        }
        if old.acceptsUnlistedCertificates != new.acceptsUnlistedCertificates {
            changes.append("unlisted certificates \(new.acceptsUnlistedCertificates ? "accepted" : "refused")")
        }
        return changes
    }

    /// SHA-256 of each file's contents (a file that cannot be read has none).
    static func digests(of files: [String]) -> [String: String] {
        var digests: [String: String] = [:]
        for file in files {
            if let data = FileManager.default.contents(atPath: file) {
                digests[file] = SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
            }
        }
        return digests
    }
}

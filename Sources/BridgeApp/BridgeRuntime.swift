import BridgeCore
import BridgeServer
import BridgeStores
import BridgeUpstream
import Configuration
import Foundation
import Logging
import NIOCore
import Prometheus
import ServiceLifecycle
import UnixSignals
import UpstreamAPNs

/// `apns-bridge serve`, assembled: the store, one upstream client per credential, the legacy
/// listeners, the admin port, the reloader and the periodic jobs, run as one
/// swift-service-lifecycle `ServiceGroup` that SIGTERM and SIGINT shut down gracefully
/// (CONTRACT §1.8) and SIGHUP reloads (``ConfigurationReloader``).
///
/// The services are listed in dependency order: the store, the upstream clients, the usage
/// writer and the jobs, the reloader, the admin port, the legacy listeners. ServiceGroup shuts
/// them down in reverse, each once the one after it has finished: the listeners first (every
/// provider gets its farewell), the store last, after the final usage write.
public final class BridgeRuntime: Sendable {
    /// The settings the bridge started with.
    public let settings: BridgeSettings
    public let gateway: GatewayServer
    public let feedback: FeedbackServer
    public let admin: AdminServer?
    public let upstream: ReloadableUpstream
    public let store: any BridgeStore
    public let reloader: ConfigurationReloader
    /// The migration view: usage per tenant, written to the store; the per-tenant gauges.
    let migration: MigrationView
    /// Every part as a service, in dependency order; ``run()`` runs it.
    private let group: ServiceGroup
    private let logger: Logger

    private init(
        settings: BridgeSettings,
        configFileWatch: ReloadingFileProvider<YAMLSnapshot>?,
        reloadSignals: UnixSignalsSequence,
        statusPage: StatusPage?,
        gateway: GatewayServer,
        feedback: FeedbackServer,
        admin: AdminServer?,
        upstream: ReloadableUpstream,
        store: any BridgeStore,
        reloader: ConfigurationReloader,
        migration: MigrationView,
        logger: Logger
    ) {
        self.migration = migration
        self.settings = settings
        self.gateway = gateway
        self.feedback = feedback
        self.admin = admin
        self.upstream = upstream
        self.store = store
        self.reloader = reloader
        self.logger = logger
        self.group = Self.serviceGroup(
            settings: settings,
            store: store,
            upstream: upstream,
            migration: migration,
            statusPage: statusPage,
            reload: ReloadService(
                reloader: reloader,
                signals: reloadSignals,
                configFileWatch: configFileWatch,
                watchInterval: settings.watchInterval,
                logger: logger
            ),
            admin: admin,
            listeners: LegacyListenersService(gateway: gateway, feedback: feedback, logger: logger),
            logger: logger
        )
    }

    /// Opens the store, binds every listener, opens the upstream connections, hands the
    /// running bridge to `ready` (the `ready` line of `serve`, the demo's round trip), then runs
    /// it until SIGTERM or SIGINT (or ``shutdown()``) and returns once everything has stopped:
    /// the store, whose scope is this call, last. What was started is stopped again when a later
    /// step fails; a failure to start is a ``ConfigurationError`` naming its key.
    ///
    /// - Parameters:
    ///   - source: where `settings` were read, to read them again on reload; `nil`: they were
    ///     made in code, and a reload is refused.
    ///   - metrics: the registry `/metrics` exports (``BridgeMetrics/bootstrapPrometheus()``).
    ///   - logLevel: the process's log level, which a reload sets.
    public static func serve(
        _ settings: BridgeSettings,
        source: SettingsSource? = nil,
        metrics: PrometheusCollectorRegistry?,
        logLevel: LiveLogLevel? = nil,
        logger: Logger,
        ready: (BridgeRuntime) async throws -> Void = { _ in }
    ) async throws {
        // Everything that can be checked without side effects was checked by BridgeSettings.load;
        // what still fails here is named by its key (ConfigurationError), never a bare error.
        let credentialSet: [String: APNsCredentials]
        do {
            credentialSet = try settings.makeCredentials(logger: logger)
        } catch {
            throw ConfigurationError(key: "credentials", "cannot open the upstream credentials: \(error)")
        }
        // Every listen address can be bound: checked before the store is opened or anything is
        // up, so a port in use leaves nothing half-started.
        try ListenAddressProbe.check("gateway.listen", host: settings.gateway.host, port: settings.gateway.port)
        try ListenAddressProbe.check("feedback.listen", host: settings.feedback.host, port: settings.feedback.port)
        if let admin = settings.admin {
            try ListenAddressProbe.check("admin.listen", host: admin.host, port: admin.port)
        }
        var opened = false
        do {
            try await BridgeStoreLocation.withStore(settings.storeLocation, configuration: settings.store, logger: logger) { store in
                opened = true
                let runtime = try await Self.start(settings, store: store, credentials: credentialSet, source: source, metrics: metrics, logLevel: logLevel, logger: logger)
                try await ready(runtime)
                try await runtime.run()
            }
        } catch where !opened {
            throw ConfigurationError(key: "store.url", "cannot open \(BridgeStoreLocation.redacted(settings.storeLocation)): \(error)")
        }
    }

    /// Binds every listener and opens the upstream connections, with the store open.
    private static func start(
        _ settings: BridgeSettings,
        store: any BridgeStore,
        credentials credentialSet: [String: APNsCredentials],
        source: SettingsSource?,
        metrics: PrometheusCollectorRegistry?,
        logLevel: LiveLogLevel?,
        logger: Logger
    ) async throws -> BridgeRuntime {
        let makeClient: @Sendable (String, APNsCredentials) throws -> APNsNotificationUpstream = { name, credentials in
            var clientLogger = logger
            clientLogger[metadataKey: "credentials"] = "\(name)"
            return try APNsNotificationUpstream(configuration: settings.upstream, credentials: credentials, logger: clientLogger)
        }
        var clients: [String: APNsNotificationUpstream] = [:]
        for (name, credentials) in credentialSet {
            clients[name] = try makeClient(name, credentials)
        }
        CertificateExpiry.shared.update(CertificateExpiry.dates(settings, credentials: credentialSet))
        BridgeGauges.shared.buildInfo(version: BridgeVersion.version, engine: settings.upstream.client.engine.rawValue)
        logger.info("upstream HTTP/2 engine", metadata: ["engine": "\(settings.upstream.client.engine)", "available": "\(BridgeVersion.engines)"])
        let upstream = ReloadableUpstream(clients: clients, defaultCredentials: settings.defaultCredentials)
        let tenants = ReloadableTenantResolver(settings.tenants)
        // Every series the dashboard and the alert rules name exists from the first scrape.
        let knownTenants = settings.tenants.rules.map(\.name)
        GatewayMetrics.shared.prepareSeries(tenants: knownTenants)
        ConfigurationReloader.prepareSeries()
        let migration = MigrationView(recorder: UsageRecorder(), store: store, logger: logger)
        await migration.updateGauges(knownTenants: knownTenants)
        // Read now, before the listeners: a change from here on is a change.
        let configFileWatch: ReloadingFileProvider<YAMLSnapshot>?
        do {
            configFileWatch = try await ReloadService.watch(source?.file, every: settings.watchInterval, logger: logger)
        } catch {
            throw ConfigurationError(key: "--config", "cannot watch \(source?.file ?? ""): \(error)")
        }
        // SIGHUP is trapped before the bridge says it is ready.
        let reloadSignals = await UnixSignalsSequence(trapping: .sighup)
        let tls = try LegacyTLSContext(configuration: settings.gateway.tls, tenantResolver: tenants, logger: logger)
        let gateway = try await Self.listening("gateway.listen", settings.gateway.host, settings.gateway.port) {
            try await GatewayServer.start(
                configuration: settings.gateway,
                upstream: upstream,
                resendRecords: store,
                feedback: store,
                tenantResolver: tenants,
                tlsContext: tls,
                usage: migration.recorder,
                logger: logger
            )
        }
        let feedback: FeedbackServer
        do {
            feedback = try await Self.listening("feedback.listen", settings.feedback.host, settings.feedback.port) {
                try await FeedbackServer.start(
                    configuration: settings.feedback,
                    store: store,
                    tenantResolver: tenants,
                    tlsContext: tls,
                    usage: migration.recorder,
                    logger: logger
                )
            }
        } catch {
            await gateway.close()
            throw error
        }
        let reloader = ConfigurationReloader(
            source: source,
            settings: settings,
            tenants: tenants,
            tls: tls,
            upstream: upstream,
            gateway: gateway,
            logLevel: logLevel,
            makeClient: makeClient,
            logger: logger
        )
        let statusPage = metrics.map {
            StatusPage(registry: $0, reloader: reloader, upstream: upstream, gateway: gateway, store: store, migration: migration)
        }
        let readiness = Readiness(upstream: upstream, tenants: tenants)
        readiness.warmUp()
        var admin: AdminServer?
        if let address = settings.admin {
            do {
                admin = try await Self.listening("admin.listen", address.host, address.port) {
                    try await AdminServer.start(
                        host: address.host,
                        port: address.port,
                        probes: readiness.probes(reloader: reloader, statusPage: statusPage),
                        registry: metrics,
                        logger: logger
                    )
                }
            } catch {
                await feedback.close()
                await gateway.close()
                upstream.shutdown()
                throw error
            }
        }
        return BridgeRuntime(
            settings: settings,
            configFileWatch: configFileWatch,
            reloadSignals: reloadSignals,
            statusPage: statusPage,
            gateway: gateway,
            feedback: feedback,
            admin: admin,
            upstream: upstream,
            store: store,
            reloader: reloader,
            migration: migration,
            logger: logger
        )
    }

    /// Binds a listener; a failure (a port in use, an address not on this machine) names the key
    /// and the address.
    private static func listening<Server>(_ key: String, _ host: String, _ port: Int, _ start: () async throws -> Server) async throws -> Server {
        do {
            return try await start()
        } catch let error as ConfigurationError {
            throw error
        } catch {
            let address = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
            throw ConfigurationError(key: key, "cannot listen on \(address): \(error)")
        }
    }

    /// Runs until SIGTERM or SIGINT (or ``shutdown()``), then shuts the services down gracefully in
    /// reverse order: the listeners first (each provider gets `08 0A id`, within the grace
    /// period), then the admin port, the reloader and the jobs (the usage writer writes once
    /// more), then the upstream connections, and last the store.
    private func run() async throws {
        do {
            try await self.group.run()
        } catch {
            self.logger.error("a service failed", metadata: ["error": "\(error)"])
        }
        self.logger.info("stopped")
    }

    /// Asks the bridge to shut down as SIGTERM does (also from ``serve``'s `ready`, before it
    /// runs: its services then start and stop at once, in the same order).
    public func shutdown() async {
        await self.group.triggerGracefulShutdown()
    }

    private static func serviceGroup(
        settings: BridgeSettings,
        store: any BridgeStore,
        upstream: ReloadableUpstream,
        migration: MigrationView,
        statusPage: StatusPage?,
        reload: ReloadService,
        admin: AdminServer?,
        listeners: LegacyListenersService,
        logger: Logger
    ) -> ServiceGroup {
        let reclaimer = MemoryReclaimer(logger: logger)
        var services: [any Service] = [
            StoreService(store: store, logger: logger),
            UpstreamService(upstream: upstream, logger: logger),
            // Last of the jobs to stop, and once more at shutdown: what the listeners counted
            // until they closed.
            PeriodicJob(name: "usage writer", every: MigrationView.writeInterval, runsAtShutdown: true, logger: logger) {
                await migration.write()
            },
            PeriodicJob(name: "store maintenance", every: BridgeStoreMaintenance.interval, logger: logger) {
                await BridgeStoreMaintenance.sweepOnce(store, logger: logger)
            },
            PeriodicJob(name: "feedback and tenant gauges", every: MigrationView.gaugeInterval, runsAtStart: true, logger: logger) {
                [reloader = reload.reloader] in
                if let pending = try? await store.pendingCount() {
                    BridgeGauges.shared.feedbackPending(pending)
                }
                await migration.updateGauges(knownTenants: await reloader.settings.tenants.rules.map(\.name))
            },
            PeriodicJob(name: "memory reclaimer", every: MemoryReclaimer.interval, runsAtStart: true, logger: logger) {
                reclaimer.reclaimIfWorthwhile()
            },
        ]
        if let statusPage {
            services.append(PeriodicJob(name: "status page sample", every: .seconds(5), runsAtStart: true, logger: logger) { statusPage.sample() })
        }
        services.append(reload)
        if let admin {
            services.append(admin)
        }
        services.append(listeners)

        let grace = Duration.nanoseconds(settings.gateway.shutdownGracePeriod.nanoseconds + settings.gateway.errorDrainTime.nanoseconds)
        var configuration = ServiceGroupConfiguration(
            // A service that fails shuts the others down in the same order as a signal does, so
            // the store is still closed cleanly.
            services: services.map { .init(service: $0, failureTerminationBehavior: .gracefullyShutdownGroup) },
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger
        )
        configuration.maximumGracefulShutdownDuration = grace + .seconds(10)
        return ServiceGroup(configuration: configuration)
    }
}

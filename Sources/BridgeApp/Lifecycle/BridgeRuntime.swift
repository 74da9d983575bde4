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
/// (docs/protocol.md, "Shutdown") and SIGHUP reloads (``ConfigurationReloader``).
///
/// The lifecycle (docs/ARCHITECTURE.md, "The lifecycle of `serve`"):
/// - the store is held in a scope (``BridgeStoreLocation/withStore(_:configuration:logger:_:)``)
///   around the group, and closed once, when every service has ended;
/// - each service owns what it opens: the upstream clients' connections are opened in
///   ``UpstreamService``'s `run()`, each listener binds in its ``ListenerService``'s `run()`;
/// - "every listener is up" is an event (``ListenerSet/allListening()``), and only then does
///   `ready` run, beside the group: the `ready` line of `serve`, the demo's round trip;
/// - a service that fails (a port taken since the probe) shuts the group down in reverse order,
///   as SIGTERM does, and `serve` throws its ``ConfigurationError``.
///
/// The services are listed in dependency order: the upstream clients, the usage writer and the
/// jobs, the reloader, the admin port, the gateway, the feedback service. ServiceGroup shuts them
/// down in reverse, each once the one after it has finished: the listeners first (every provider
/// gets its farewell), the upstream connections last; then the store's scope closes it.
package enum BridgeRuntime {
    /// A bridge whose listeners are all up, as `ready` gets it.
    package struct Running: Sendable {
        /// Where the gateway, the feedback service and the admin port listen.
        package var addresses: ListeningAddresses
        package var store: any BridgeStore
        fileprivate var group: ServiceGroup

        /// Asks the bridge to shut down as SIGTERM does.
        package func shutdown() async {
            await self.group.triggerGracefulShutdown()
        }
    }

    /// Opens the store, runs every service, hands the running bridge to `ready` once every
    /// listener is up, and returns when the group has ended (SIGTERM, SIGINT, ``Running/shutdown()``,
    /// or a failed service) and the store is closed. When `ready` throws, the bridge shuts
    /// down as on SIGTERM and this throws `ready`'s error. A failure to start is a
    /// ``ConfigurationError`` naming its key.
    ///
    /// - Parameters:
    ///   - source: where `settings` were read, to read them again on reload; `nil`: they were
    ///     made in code, and a reload is refused.
    ///   - metrics: the registry `/metrics` exports (``BridgeMetrics/bootstrapPrometheus()``).
    ///   - logLevel: the process's log level, which a reload sets.
    package static func serve(
        _ settings: BridgeSettings,
        source: SettingsSource? = nil,
        metrics: PrometheusCollectorRegistry?,
        logLevel: LiveLogLevel? = nil,
        logger: Logger,
        ready: @escaping @Sendable (Running) async throws -> Void = { _ in }
    ) async throws {
        // Everything that can be checked without side effects was checked by BridgeSettings.load;
        // what still fails here is named by its key (ConfigurationError), never a bare error.
        let credentialSet: [String: APNsCredentials]
        do {
            credentialSet = try settings.makeCredentials(logger: logger)
        } catch {
            throw ConfigurationError(.credentials, "cannot open the upstream credentials: \(error)")
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
            try await BridgeStoreLocation.withStore(
                settings.storeLocation,
                configuration: settings.store,
                logger: logger
            ) { store in
                opened = true
                let (group, listeners) = try await Self.assemble(
                    settings,
                    store: store,
                    credentials: credentialSet,
                    source: source,
                    metrics: metrics,
                    logLevel: logLevel,
                    logger: logger
                )
                try await Self.run(group, listeners: listeners, store: store, ready: ready, logger: logger)
            }
        } catch  where !opened {
            throw ConfigurationError(
                key: "store.url",
                "cannot open \(BridgeStoreLocation.redacted(settings.storeLocation)): \(error)"
            )
        }
    }

    /// Runs the group and, once every listener is up, `ready` beside it.
    private static func run(
        _ group: ServiceGroup,
        listeners: ListenerSet,
        store: any BridgeStore,
        ready: @escaping @Sendable (Running) async throws -> Void,
        logger: Logger
    ) async throws {
        enum Ended: Sendable {
            case group((any Error)?)
            case ready((any Error)?)
        }
        try await withThrowingTaskGroup(of: Ended.self) { tasks in
            tasks.addTask {
                do {
                    try await group.run()
                    return .group(nil)
                } catch {
                    return .group(error)
                }
            }
            tasks.addTask {
                do {
                    let addresses = try await listeners.allListening()
                    try await ready(Running(addresses: addresses, store: store, group: group))
                    return .ready(nil)
                } catch {
                    return .ready(error)
                }
            }
            var readyFailure: (any Error)?
            while let ended = try await tasks.next() {
                switch ended {
                case .ready(nil):
                    continue
                case .ready(let error?):
                    // The bridge shuts down as on SIGTERM; the group's own failure (a listener
                    // that could not bind, which `ready` waited for) is the one reported.
                    readyFailure = error
                    await group.triggerGracefulShutdown()
                case .group(let error):
                    tasks.cancelAll()  // a `ready` still waiting for the listeners, or running
                    if let error {
                        logger.error("a service failed; the bridge stopped", metadata: ["error": "\(error)"])
                        throw error
                    }
                    logger.info("stopped")
                    if let readyFailure {
                        throw readyFailure
                    }
                    return
                }
            }
        }
    }

    /// Makes every part, opening nothing: the upstream clients connect and the listeners bind
    /// in their services' `run()`.
    private static func assemble(
        _ settings: BridgeSettings,
        store: any BridgeStore,
        credentials credentialSet: [String: APNsCredentials],
        source: SettingsSource?,
        metrics: PrometheusCollectorRegistry?,
        logLevel: LiveLogLevel?,
        logger: Logger
    ) async throws -> (ServiceGroup, ListenerSet) {
        // A client opens no connection before its first request (or UpstreamService's warm-up).
        let makeClient: @Sendable (String, APNsCredentials) throws -> APNsNotificationUpstream = { name, credentials in
            var clientLogger = logger
            clientLogger[metadataKey: "credentials"] = "\(name)"
            return try APNsNotificationUpstream(
                configuration: settings.upstream,
                credentials: credentials,
                logger: clientLogger
            )
        }
        var clients: [String: APNsNotificationUpstream] = [:]
        for (name, credentials) in credentialSet {
            clients[name] = try makeClient(name, credentials)
        }
        // The process's own metrics, made once (after the metrics system's bootstrap) and handed
        // to what counts into them.
        let gatewayMetrics = GatewayMetrics()
        let gauges = BridgeGauges()
        let expiry = CertificateExpiry()
        expiry.update(CertificateExpiry.dates(settings, credentials: credentialSet))
        gauges.buildInfo(version: BridgeVersion.version, engine: settings.upstream.client.engine.rawValue)
        logger.info(
            "upstream HTTP/2 engine",
            metadata: ["engine": "\(settings.upstream.client.engine)", "available": "\(BridgeVersion.engines)"]
        )
        let upstream = ReloadableUpstream(clients: clients, defaultCredentials: settings.defaultCredentials)
        let tenants = ReloadableTenantResolver(settings.tenants)
        // Every series the dashboard and the alert rules name exists from the first scrape.
        let knownTenants = settings.tenants.rules.map(\.name)
        gatewayMetrics.prepareSeries(tenants: knownTenants)
        let migration = MigrationView(recorder: UsageRecorder(), store: store, logger: logger)
        await migration.updateGauges(knownTenants: knownTenants)
        // Read now, before the listeners: a change from here on is a change.
        let configFileWatch: ReloadingFileProvider<YAMLSnapshot>?
        do {
            configFileWatch = try await ReloadService.watch(source?.file, every: settings.watchInterval, logger: logger)
        } catch {
            throw ConfigurationError.configurationFile("cannot watch \(source?.file ?? ""): \(error)")
        }
        // SIGHUP is trapped before the bridge says it is ready.
        let reloadSignals = await UnixSignalsSequence(trapping: .sighup)
        let tls = try LegacyTLSContext(configuration: settings.gateway.tls, tenantResolver: tenants, logger: logger)
        let listeners = ListenerSet(expectsAdmin: settings.admin != nil)
        let reloader = ConfigurationReloader(
            source: source,
            settings: settings,
            tenants: tenants,
            tls: tls,
            upstream: upstream,
            listeners: listeners,
            logLevel: logLevel,
            makeClient: makeClient,
            expiry: expiry,
            logger: logger
        )
        let statusPage = metrics.map {
            StatusPage(
                registry: $0,
                reloader: reloader,
                upstream: upstream,
                listeners: listeners,
                store: store,
                migration: migration,
                expiry: expiry
            )
        }
        let readiness = Readiness(upstream: upstream, tenants: tenants, store: store.health, gauges: gauges)

        let reclaimer = MemoryReclaimer(logger: logger)
        var services: [any Service] = [
            UpstreamService(upstream: upstream, readiness: readiness, logger: logger),
            // Last of the jobs to stop, and once more at shutdown: what the listeners counted
            // until they closed.
            PeriodicJob(name: "usage writer", every: MigrationView.writeInterval, runsAtShutdown: true, logger: logger)
            {
                await migration.write()
            },
            PeriodicJob(name: "store maintenance", every: BridgeStoreMaintenance.interval, logger: logger) {
                await BridgeStoreMaintenance.sweepOnce(store, logger: logger)
            },
            PeriodicJob(
                name: "feedback and tenant gauges",
                every: MigrationView.gaugeInterval,
                runsAtStart: true,
                logger: logger
            ) {
                if let pending = try? await store.pendingCount() {
                    gauges.feedbackPending(pending)
                }
                await migration.updateGauges(knownTenants: await reloader.settings.tenants.rules.map(\.name))
            },
            PeriodicJob(name: "memory reclaimer", every: MemoryReclaimer.interval, runsAtStart: true, logger: logger) {
                reclaimer.reclaimIfWorthwhile()
            },
        ]
        if let statusPage {
            services.append(
                PeriodicJob(name: "status page sample", every: .seconds(5), runsAtStart: true, logger: logger) {
                    statusPage.sample()
                }
            )
        }
        services.append(
            ReloadService(
                reloader: reloader,
                signals: reloadSignals,
                configFileWatch: configFileWatch,
                watchInterval: settings.watchInterval,
                logger: logger
            )
        )
        if let address = settings.admin {
            services.append(
                ListenerService(
                    key: "admin.listen",
                    host: address.host,
                    port: address.port,
                    listeners: listeners,
                    bind: {
                        try await AdminServer.start(
                            host: address.host,
                            port: address.port,
                            probes: readiness.probes(reloader: reloader, statusPage: statusPage),
                            registry: metrics,
                            logger: logger
                        )
                    },
                    announce: { listeners.listening($0) },
                    stop: { await $0.close() }
                )
            )
        }
        services.append(
            ListenerService(
                key: "gateway.listen",
                host: settings.gateway.host,
                port: settings.gateway.port,
                listeners: listeners,
                bind: {
                    try await GatewayServer.start(
                        configuration: settings.gateway,
                        upstream: upstream,
                        resendRecords: store,
                        feedback: store,
                        tenantResolver: tenants,
                        tlsContext: tls,
                        usage: migration.recorder,
                        metrics: gatewayMetrics,
                        logger: logger
                    )
                },
                announce: { listeners.listening($0) },
                serve: { await $0.run() },
                stop: { gateway in
                    logger.info("shutting down the gateway: every provider gets its farewell")
                    await gateway.shutdownGracefully()
                }
            )
        )
        services.append(
            ListenerService(
                key: "feedback.listen",
                host: settings.feedback.host,
                port: settings.feedback.port,
                listeners: listeners,
                bind: {
                    try await FeedbackServer.start(
                        configuration: settings.feedback,
                        store: store,
                        tenantResolver: tenants,
                        tlsContext: tls,
                        usage: migration.recorder,
                        metrics: gatewayMetrics,
                        logger: logger
                    )
                },
                announce: { listeners.listening($0) },
                serve: { await $0.run() },
                stop: { await $0.close() }
            )
        )

        let gatewayBound = Duration.nanoseconds(settings.gateway.shutdownBound.nanoseconds)
        var configuration = ServiceGroupConfiguration(
            // A service that fails shuts the others down in the same order as a signal does.
            services: services.map { .init(service: $0, failureTerminationBehavior: .gracefullyShutdownGroup) },
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger
        )
        configuration.maximumGracefulShutdownDuration = gatewayBound + .seconds(10)
        return (ServiceGroup(configuration: configuration), listeners)
    }
}

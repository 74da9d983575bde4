import BridgeCore
import BridgeForwarding
import BridgeServer
import BridgeStores
import Configuration
import Foundation
import Logging
import NIOCore
import Prometheus
import ServiceLifecycle
import Synchronization
import UnixSignals
import UpstreamAPNs

/// `apns-bridge serve`, assembled: the store, one upstream client per credential, the legacy
/// listeners, the admin port, the reloader and the periodic jobs, run as one
/// swift-service-lifecycle `ServiceGroup` that SIGTERM and SIGINT shut down gracefully
/// (docs/protocol.md, "Shutdown") and SIGHUP reloads (``ConfigurationReloader``).
///
/// The lifecycle (docs/internals.md, "The lifecycle of `serve`"):
/// - the store is held in a scope (``BridgeStoreLocation/withStore(_:configuration:logger:_:)``)
///   around the group, and closed once, when every service has ended;
/// - each service owns what it opens: the upstream clients' connections are opened in
///   ``UpstreamService``'s `run()`, each listener binds in its ``ListenerService``'s `run()` and
///   reports its address;
/// - `ready` is a service of the group (``ReadyService``): it runs once every listener has
///   reported: the `ready` line of `serve`, the demo's round trip;
/// - a service that fails (a port taken since the probe, a `ready` that throws) shuts the group
///   down in reverse order, as SIGTERM does, and `serve` throws its error.
///
/// The services are listed in dependency order: `ready`, the push log's failure writer, the
/// upstream clients, the usage writer and the jobs, the reloader, the admin port, the gateway,
/// the feedback service. ServiceGroup shuts them down in reverse, each once the one after it has
/// finished: the listeners first (every provider gets its farewell), the upstream connections,
/// then `ready`; then the store's scope closes the store.
package enum BridgeRuntime {
    /// A bridge whose listeners are all up, as `ready` gets it.
    package struct Running: Sendable {
        /// Where the gateway, the feedback service and the admin port listen.
        package var addresses: ListeningAddresses
        package var store: any BridgeStore
        fileprivate var group: GroupReference

        /// Asks the bridge to shut down as SIGTERM does.
        package func shutdown() async {
            await self.group.triggerGracefulShutdown()
        }
    }

    /// The group, made after its services: the running bridge that ``ReadyService`` hands to
    /// `ready` shuts it down.
    fileprivate final class GroupReference: Sendable {
        private let group = Mutex<ServiceGroup?>(nil)

        func set(_ group: ServiceGroup) {
            self.group.withLock { $0 = group }
        }

        func triggerGracefulShutdown() async {
            await self.group.withLock { $0 }?.triggerGracefulShutdown()
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
                let (listening, listened) = AsyncStream.makeStream(of: ListeningAddresses.Listener.self)
                let group = GroupReference()
                let readyService = ReadyService(
                    listening: listening,
                    expectsAdmin: settings.admin != nil,
                    running: { Running(addresses: $0, store: store, group: group) },
                    ready: ready
                )
                let services = try await Self.assemble(
                    settings,
                    store: store,
                    credentials: credentialSet,
                    source: source,
                    metrics: metrics,
                    logLevel: logLevel,
                    onListening: { listened.yield($0) },
                    logger: logger
                )
                let serviceGroup = Self.group(of: [readyService] + services, settings: settings, logger: logger)
                group.set(serviceGroup)
                try await Self.run(serviceGroup, logger: logger)
            }
        } catch  where !opened {
            throw ConfigurationError(
                key: "store.url",
                "cannot open \(BridgeStoreLocation.redacted(settings.storeLocation)): \(error)"
            )
        }
    }

    /// The services as one group: a service that fails shuts the others down in the same order
    /// as a signal does, within the gateway's shutdown bound and a margin.
    private static func group(of services: [any Service], settings: BridgeSettings, logger: Logger) -> ServiceGroup {
        let gatewayBound = Duration.nanoseconds(settings.gateway.shutdownBound.nanoseconds)
        var configuration = ServiceGroupConfiguration(
            services: services.map { .init(service: $0, failureTerminationBehavior: .gracefullyShutdownGroup) },
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger
        )
        configuration.maximumGracefulShutdownDuration = gatewayBound + .seconds(10)
        return ServiceGroup(configuration: configuration)
    }

    /// Runs the group until it has ended; a service's failure is logged, `ready`'s is its
    /// caller's to report.
    private static func run(_ group: ServiceGroup, logger: Logger) async throws {
        do {
            try await group.run()
        } catch let failure as ReadyService<Running>.Failure {
            logger.info("stopped")
            throw failure.error
        } catch {
            logger.error("a service failed; the bridge stopped", metadata: ["error": "\(error)"])
            throw error
        }
        logger.info("stopped")
    }

    /// Makes every service but `ready`, opening nothing: the upstream clients connect and the
    /// listeners bind in their services' `run()`. In dependency order (the group shuts them
    /// down in reverse): the upstream, the jobs, the reloader, the listeners.
    private static func assemble(
        _ settings: BridgeSettings,
        store: any BridgeStore,
        credentials credentialSet: [String: APNsCredentials],
        source: SettingsSource?,
        metrics: PrometheusCollectorRegistry?,
        logLevel: LiveLogLevel?,
        onListening: @escaping @Sendable (ListeningAddresses.Listener) -> Void,
        logger: Logger
    ) async throws -> [any Service] {
        // Each instance's own log of what APNs answered (docs/operations.md#did-it-go).
        let pushLog =
            settings.pushLog.entries > 0
            ? PushLog(
                capacity: settings.pushLog.entries,
                keepsFullTokens: settings.pushLog.fullTokens,
                keepsFailuresForStore: true
            ) : nil
        let forwarding = try Self.makeForwarder(settings, credentials: credentialSet, pushLog: pushLog, logger: logger)
        // The process's own metrics, made once (after the metrics system's bootstrap) and handed
        // to what counts into them.
        let gatewayMetrics = GatewayMetrics()
        let gauges = BridgeGauges()
        let expiry = CertificateExpiry()
        expiry.update(CertificateExpiry.dates(settings, credentials: credentialSet))
        gauges.buildInfo(version: BridgeVersion.version, engine: settings.upstream.client.engine.rawValue)
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
        let reloader = ConfigurationReloader(
            source: source,
            settings: settings,
            tenants: tenants,
            tls: tls,
            forwarder: forwarding.reloadable,
            logLevel: logLevel,
            makeClient: forwarding.makeClient,
            expiry: expiry,
            logger: logger
        )
        let statusPage = metrics.map {
            StatusPage(
                registry: $0,
                reloader: reloader,
                forwarder: forwarding.reloadable,
                store: store,
                migration: migration,
                expiry: expiry,
                pushLog: pushLog
            )
        }
        let readiness = Readiness(
            forwarder: forwarding.reloadable,
            tenants: tenants,
            store: store.health,
            gauges: gauges
        )

        var services: [any Service] = []
        if let pushLog {
            // Before the upstream clients in the list, so it stops after them: its copy at
            // shutdown takes the failures their last answers left.
            let writer = PushFailureWriter(pushLog: pushLog, store: store, logger: logger)
            services.append(
                PeriodicJob(
                    name: "push log failure writer",
                    every: PushFailureWriter.interval,
                    runsAtShutdown: true,
                    logger: logger
                ) {
                    _ = await writer.copy()
                }
            )
        }
        services.append(UpstreamService(forwarder: forwarding.reloadable, readiness: readiness, logger: logger))
        services += Self.jobs(
            store: store,
            migration: migration,
            gauges: gauges,
            reloader: reloader,
            statusPage: statusPage,
            logger: logger
        )
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
                    bind: {
                        try await AdminServer.start(
                            host: address.host,
                            port: address.port,
                            probes: readiness.probes(reloader: reloader, statusPage: statusPage, pushLog: pushLog),
                            registry: metrics,
                            logger: logger
                        )
                    },
                    onListening: { onListening(.admin($0.localAddress)) },
                    stop: { await $0.close() }
                )
            )
        }
        services.append(
            ListenerService(
                key: "gateway.listen",
                host: settings.gateway.host,
                port: settings.gateway.port,
                bind: {
                    try await GatewayServer.start(
                        configuration: settings.gateway,
                        forwarder: forwarding.reloadable,
                        resendRecords: store,
                        feedback: store,
                        tenantResolver: tenants,
                        tlsContext: tls,
                        usage: migration.recorder,
                        metrics: gatewayMetrics,
                        pushLog: pushLog,
                        logger: logger
                    )
                },
                onListening: { gateway in
                    await reloader.gatewayListening(gateway)
                    onListening(.gateway(gateway.localAddress))
                },
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
                onListening: { onListening(.feedback($0.localAddress)) },
                serve: { await $0.run() },
                stop: { await $0.close() }
            )
        )
        return services
    }

    /// The periodic jobs: the usage writer (the last of them to stop, and once more at
    /// shutdown: what the listeners counted until they closed), the store's maintenance, the
    /// gauges, the memory reclaimer and the status page's samples.
    private static func jobs(
        store: any BridgeStore,
        migration: MigrationView,
        gauges: BridgeGauges,
        reloader: ConfigurationReloader,
        statusPage: StatusPage?,
        logger: Logger
    ) -> [any Service] {
        let reclaimer = MemoryReclaimer(logger: logger)
        var jobs = [
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
            jobs.append(
                PeriodicJob(name: "status page sample", every: .seconds(5), runsAtStart: true, logger: logger) {
                    statusPage.sample()
                }
            )
        }
        return jobs
    }
}

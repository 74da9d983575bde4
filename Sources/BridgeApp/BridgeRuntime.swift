import BridgeCore
import BridgeServer
import BridgeStores
import Foundation
import Logging
import NIOCore
import Prometheus
import ServiceLifecycle
import UnixSignals
import UpstreamAPNs

/// `apns-bridge serve`, assembled: the store, one upstream client per credential, the legacy
/// listeners, the admin port and the periodic jobs, run as one swift-service-lifecycle
/// `ServiceGroup` that SIGTERM and SIGINT shut down gracefully (CONTRACT §1.8).
public final class BridgeRuntime: Sendable {
    public let settings: BridgeSettings
    public let gateway: GatewayServer
    public let feedback: FeedbackServer
    public let admin: AdminServer?
    public let upstream: APNsClientSet
    public let store: any BridgeStore
    private let tls: LegacyTLSContext
    private let logger: Logger

    private init(
        settings: BridgeSettings,
        gateway: GatewayServer,
        feedback: FeedbackServer,
        admin: AdminServer?,
        upstream: APNsClientSet,
        store: any BridgeStore,
        tls: LegacyTLSContext,
        logger: Logger
    ) {
        self.settings = settings
        self.gateway = gateway
        self.feedback = feedback
        self.admin = admin
        self.upstream = upstream
        self.store = store
        self.tls = tls
        self.logger = logger
    }

    /// Opens the store, binds every listener and opens the upstream connections. What was
    /// started is stopped again when a later step fails.
    ///
    /// - Parameter metrics: the registry `/metrics` exports (``BridgeMetrics/bootstrapPrometheus()``).
    public static func start(_ settings: BridgeSettings, metrics: PrometheusCollectorRegistry?, logger: Logger) async throws -> BridgeRuntime {
        // Everything that can be checked without side effects was checked by BridgeSettings.load;
        // what still fails here is named by its key (ConfigurationError), never a bare error.
        let credentialSet: [String: APNsCredentials]
        do {
            credentialSet = try settings.makeCredentials(logger: logger)
        } catch {
            throw ConfigurationError(key: "credentials", "cannot open the upstream credentials: \(error)")
        }
        let store: any BridgeStore
        do {
            store = try await BridgeStoreLocation.open(settings.storeLocation, configuration: settings.store, logger: logger)
        } catch {
            throw ConfigurationError(key: "store.url", "cannot open \(BridgeStoreLocation.redacted(settings.storeLocation)): \(error)")
        }
        do {
            var clients: [String: APNsClient] = [:]
            for (name, credentials) in credentialSet {
                var clientLogger = logger
                clientLogger[metadataKey: "credentials"] = "\(name)"
                clients[name] = try APNsClient(configuration: settings.upstream, credentials: credentials, logger: clientLogger)
            }
            let upstream = APNsClientSet(clients: clients, defaultCredentials: settings.defaultCredentials)
            let tls = try LegacyTLSContext(configuration: settings.gateway.tls, tenantResolver: settings.tenants, logger: logger)
            let gateway = try await Self.listening("gateway.listen", settings.gateway.host, settings.gateway.port) {
                try await GatewayServer.start(
                    configuration: settings.gateway,
                    upstream: upstream,
                    resendRecords: store,
                    feedback: store,
                    tenantResolver: settings.tenants,
                    tlsContext: tls,
                    logger: logger
                )
            }
            let feedback: FeedbackServer
            do {
                feedback = try await Self.listening("feedback.listen", settings.feedback.host, settings.feedback.port) {
                    try await FeedbackServer.start(
                        configuration: settings.feedback,
                        store: store,
                        tenantResolver: settings.tenants,
                        tlsContext: tls,
                        logger: logger
                    )
                }
            } catch {
                await gateway.close()
                throw error
            }
            let readiness = Readiness(upstream: upstream, environments: settings.environmentsInUse)
            readiness.warmUp()
            var admin: AdminServer?
            if let address = settings.admin {
                do {
                    admin = try await Self.listening("admin.listen", address.host, address.port) {
                        try await AdminServer.start(
                            host: address.host,
                            port: address.port,
                            probes: readiness.probes,
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
                gateway: gateway,
                feedback: feedback,
                admin: admin,
                upstream: upstream,
                store: store,
                tls: tls,
                logger: logger
            )
        } catch {
            await store.close()
            throw error
        }
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

    /// Stops everything without waiting for a signal (the demo): the same order as ``run()``.
    public func stop() async {
        await self.feedback.close()
        await self.gateway.shutdownGracefully()
        await self.admin?.close()
        self.upstream.shutdown()
        await self.store.close()
    }

    /// Runs until SIGTERM or SIGINT, then shuts down gracefully: the listeners first (each
    /// provider gets `08 0A id`, within the grace period), then the admin port and the jobs;
    /// last, the upstream connections and the store.
    public func run() async throws {
        var services: [any Service] = [
            PeriodicJob(name: "store maintenance", every: .seconds(600), logger: self.logger) { [store, logger] in
                await BridgeStoreMaintenance.sweepOnce(store, logger: logger)
            },
            PeriodicJob(name: "feedback pending gauge", every: .seconds(15), logger: self.logger) { [store] in
                if let pending = try? await store.pendingCount() {
                    BridgeGauges.shared.feedbackPending(pending)
                }
            },
        ]
        if let interval = self.settings.tlsReloadInterval {
            let watcher = TLSFileWatcher(settings: self.settings, context: self.tls, logger: self.logger)
            services.append(PeriodicJob(name: "TLS file watch", every: interval, logger: self.logger) { watcher.check() })
        }
        if let admin = self.admin {
            services.append(admin)
        }
        services.append(LegacyListenersService(gateway: self.gateway, feedback: self.feedback, logger: self.logger))

        let grace = Duration.nanoseconds(self.settings.gateway.shutdownGracePeriod.nanoseconds + self.settings.gateway.errorDrainTime.nanoseconds)
        var configuration = ServiceGroupConfiguration(
            services: services.map { .init(service: $0) },
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: self.logger
        )
        configuration.maximumGracefulShutdownDuration = grace + .seconds(10)
        let group = ServiceGroup(configuration: configuration)
        do {
            try await group.run()
        } catch {
            self.logger.error("a service failed", metadata: ["error": "\(error)"])
        }
        self.upstream.shutdown()
        await self.store.close()
        self.logger.info("stopped")
    }
}

/// The gateway and feedback listeners as one service: on graceful shutdown the feedback port
/// closes and the gateway says farewell to every provider (CONTRACT §1.8).
struct LegacyListenersService: Service {
    var gateway: GatewayServer
    var feedback: FeedbackServer
    var logger: Logger

    func run() async throws {
        try? await gracefulShutdown()
        self.logger.info("shutting down the legacy listeners")
        await self.feedback.close()
        await self.gateway.shutdownGracefully()
    }
}

/// Runs `job` every `interval` until graceful shutdown.
struct PeriodicJob: Service {
    var name: String
    var every: Duration
    var logger: Logger
    var job: @Sendable () async -> Void

    init(name: String, every: Duration, logger: Logger, job: @escaping @Sendable () async -> Void) {
        self.name = name
        self.every = every
        self.logger = logger
        self.job = job
    }

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: self.every)
                await self.job()
            }
        }
    }
}

/// Readiness (`/readyz`) and the gauges read at each scrape.
struct Readiness: Sendable {
    var upstream: APNsClientSet
    var environments: Set<APNsEnvironment>

    /// Opens the upstream connections readiness depends on.
    func warmUp() {
        for client in self.upstream.clients.values {
            for environment in self.environments {
                client.warmUp(environment)
            }
        }
    }

    var isReady: Bool {
        self.upstream.clients.values.allSatisfy { client in
            self.environments.allSatisfy { client.hasUsableConnection($0) }
        }
    }

    var probes: AdminServer.Probes {
        AdminServer.Probes(
            isReady: {
                if self.isReady { return true }
                self.warmUp()  // a probe that finds no connection asks for one (the pool backs off)
                return false
            },
            beforeScrape: {
                for environment in APNsEnvironment.allCases {
                    let usable = self.upstream.clients.values.reduce(0) { $0 + $1.usableConnectionCount(environment) }
                    BridgeGauges.shared.upstreamConnections(environment, usable)
                }
            }
        )
    }
}

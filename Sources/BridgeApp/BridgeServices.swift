import BridgeServer
import BridgeStores
import BridgeUpstream
import Logging
import ServiceLifecycle

// The parts of `serve` that are services of its ServiceGroup besides the reloader and the admin
// server (each in its own file): ``BridgeRuntime`` lists them in dependency order.

/// The store as a service: first to start, last to stop. At shutdown it commits what is queued
/// and gives up this instance's claims (``BridgeStore/close()``).
struct StoreService: Service {
    var store: any BridgeStore
    var logger: Logger

    func run() async throws {
        try? await gracefulShutdown()
        self.logger.debug("closing the store")
        await self.store.close()
    }
}

/// The upstream clients as a service: at shutdown (after the listeners, so every notification
/// in flight has had its answer or its farewell) their connections close, and it returns once
/// they have.
struct UpstreamService: Service {
    var upstream: ReloadableUpstream
    var logger: Logger

    func run() async throws {
        try? await gracefulShutdown()
        self.logger.debug("closing the upstream connections")
        await self.upstream.shutdownAndWait()
    }
}

/// The gateway and feedback listeners as one service: on graceful shutdown the feedback port
/// closes and the gateway says farewell to every provider (CONTRACT §1.8).
struct LegacyListenersService: Service {
    var gateway: GatewayServer
    var feedback: FeedbackServer
    var logger: Logger

    func run() async throws {
        // The listeners' connection work (certificate checks, feedback drains) runs in these
        // two child tasks; closing a listener ends its task once that work has ended.
        await withDiscardingTaskGroup { group in
            group.addTask { await self.gateway.run() }
            group.addTask { await self.feedback.run() }
            try? await gracefulShutdown()
            self.logger.info("shutting down the legacy listeners")
            await self.feedback.close()
            await self.gateway.shutdownGracefully()
        }
    }
}

/// Runs `job` every `interval` until graceful shutdown.
struct PeriodicJob: Service {
    var name: String
    var every: Duration
    /// Runs once at start too, not only after the first interval.
    var runsAtStart: Bool
    /// Runs once more at graceful shutdown.
    var runsAtShutdown: Bool
    var logger: Logger
    var job: @Sendable () async -> Void

    init(name: String, every: Duration, runsAtStart: Bool = false, runsAtShutdown: Bool = false, logger: Logger, job: @escaping @Sendable () async -> Void) {
        self.name = name
        self.every = every
        self.runsAtStart = runsAtStart
        self.runsAtShutdown = runsAtShutdown
        self.logger = logger
        self.job = job
    }

    func run() async throws {
        if self.runsAtStart {
            await self.job()
        }
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await Task.sleep(for: self.every)
                await self.job()
            }
        }
        if self.runsAtShutdown {
            await self.job()
        }
    }
}

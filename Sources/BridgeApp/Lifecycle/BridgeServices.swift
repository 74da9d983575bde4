import BridgeForwarding
import Logging
import ServiceLifecycle

// The parts of `serve` that are services of its ServiceGroup besides the reloader and the
// listeners (``ReloadService``, ``ListenerService``): ``BridgeRuntime`` lists them in dependency
// order.

/// The upstream clients as a service: `run()` opens the connections readiness depends on;
/// at shutdown (after the listeners, so every notification in flight has had its answer or its
/// farewell) their connections close, and it returns once they have.
struct UpstreamService: Service {
    var forwarder: ReloadableForwarder
    var readiness: Readiness
    var logger: Logger

    func run() async throws {
        self.readiness.warmUp()
        try? await gracefulShutdown()
        self.logger.debug("closing the upstream connections")
        await self.forwarder.shutdownAndWait()
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

    init(
        name: String,
        every: Duration,
        runsAtStart: Bool = false,
        runsAtShutdown: Bool = false,
        logger: Logger,
        job: @escaping @Sendable () async -> Void
    ) {
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

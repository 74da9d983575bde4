import ServiceLifecycle

/// `serve`'s `ready` as the group's first service, and so the last one shut down: once every
/// listener has reported its address (``ListenerService``'s `onListening`), it hands the
/// running bridge to `ready`, then stays until its turn to shut down.
///
/// `ready` runs while the listeners serve, and while they shut down: the demo and the tests
/// read the farewell of a shutdown they asked for (``BridgeRuntime/Running/shutdown()``). It is
/// cancelled when this service's own turn comes, after every other service has ended. A
/// `ready` that throws fails the service, so the group shuts down as on SIGTERM; its error
/// leaves the group's `run()` as a ``Failure``.
///
/// `Running` is what `ready` gets: ``BridgeRuntime/Running`` in the bridge, the addresses alone
/// in its tests.
package struct ReadyService<Running: Sendable>: Service {
    var listening: AsyncStream<ListeningAddresses.Listener>
    var expectsAdmin: Bool
    var running: @Sendable (ListeningAddresses) -> Running
    var ready: @Sendable (Running) async throws -> Void

    package init(
        listening: AsyncStream<ListeningAddresses.Listener>,
        expectsAdmin: Bool,
        running: @escaping @Sendable (ListeningAddresses) -> Running,
        ready: @escaping @Sendable (Running) async throws -> Void
    ) {
        self.listening = listening
        self.expectsAdmin = expectsAdmin
        self.running = running
        self.ready = ready
    }

    /// What `ready` threw.
    package struct Failure: Error {
        package var error: any Error
    }

    package func run() async throws {
        var collector = ListeningAddresses.Collector(expectsAdmin: self.expectsAdmin)
        var addresses: ListeningAddresses?
        for await listener in self.listening.cancelOnGracefulShutdown() {
            addresses = collector.add(listener)
            if addresses != nil { break }
        }
        // Nil: the group is shutting down before every listener was up (one could not bind).
        if let addresses {
            let running = self.running(addresses)
            do {
                try await cancelWhenGracefulShutdown { try await self.ready(running) }
            } catch  where !Task.isShuttingDownGracefully {
                throw Failure(error: error)
            } catch {
                // Cancelled at this service's turn to shut down: the bridge has stopped.
            }
        }
        // A service of the group that returns before its turn to shut down would end the
        // group (swift-service-lifecycle takes it as a failure).
        try? await gracefulShutdown()
    }
}

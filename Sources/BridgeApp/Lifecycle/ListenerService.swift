import Logging
import ServiceLifecycle

/// A listener of `serve` as a service that owns its socket, as swift-service-lifecycle services
/// do: `run()` binds it (a failure names its key, `gateway.listen` or the like, and fails the
/// service, so the group shuts down whatever started, in reverse order, and `serve` exits 78),
/// calls `onListening` with the bound server (as Hummingbird's `onServerRunning`), serves until
/// graceful shutdown, then stops it and returns once it has stopped.
struct ListenerService<Server: Sendable>: Service {
    /// The configuration key of the address.
    var key: String
    var host: String
    var port: Int
    var bind: @Sendable () async throws -> Server
    var onListening: @Sendable (Server) async -> Void
    /// The server's own work while it listens (the legacy listeners' connection tasks); it
    /// ends when `stop` has stopped the server.
    var serve: @Sendable (Server) async -> Void = { _ in }
    var stop: @Sendable (Server) async -> Void

    func run() async throws {
        let server: Server
        do {
            server = try await self.bind()
        } catch {
            let address = self.host.contains(":") ? "[\(self.host)]:\(self.port)" : "\(self.host):\(self.port)"
            throw error as? ConfigurationError
                ?? ConfigurationError(key: self.key, "cannot listen on \(address): \(error)")
        }
        await self.onListening(server)
        await withDiscardingTaskGroup { group in
            group.addTask { await self.serve(server) }
            try? await gracefulShutdown()
            await self.stop(server)
        }
    }
}

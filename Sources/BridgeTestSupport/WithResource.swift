import BridgeServer
import MockAPNs

/// Something a test starts and must stop before it ends: a harness, a listener, a mock APNs, a
/// child process. ``withResource(_:_:)`` runs a test's body with one and awaits its cleanup.
public protocol ScopedResource: Sendable {
    /// Stops what the resource started; returns when it has stopped.
    func cleanUp() async
}

/// Runs `body` with `resource`, then awaits `resource.cleanUp()`, whether `body` returned or
/// threw: the test ends only once what it started has stopped (never a cleanup left running in
/// an unawaited task after the test).
///
/// (`body` returns nothing: a closure whose only `try` is inside `#expect` is then still known
/// to throw, which a generic result type would lose.)
public func withResource<Resource: ScopedResource>(
    _ resource: Resource,
    _ body: (Resource) async throws -> Void
) async throws {
    do {
        try await body(resource)
    } catch {
        await resource.cleanUp()
        throw error
    }
    await resource.cleanUp()
}

extension GatewayHarness: ScopedResource {
    public func cleanUp() async { await self.stop() }
}

extension UpstreamHarness: ScopedResource {
    public func cleanUp() async { await self.stop() }
}

extension MockAPNsServer: ScopedResource {
    public func cleanUp() async { await self.close() }
}

extension GatewayServer: ScopedResource {
    public func cleanUp() async { await self.close() }
}

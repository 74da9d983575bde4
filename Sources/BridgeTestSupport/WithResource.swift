import BridgeServer
import MockAPNs

extension ScopedResource {
    package func run() async {}
}

/// Runs `body` with `resource` while `resource.run()` runs beside it as a child task, then
/// awaits `resource.cleanUp()`, whether `body` returned or threw, and the end of `run()`: the
/// test ends only once what it started has stopped (never a cleanup left running in an
/// unawaited task after the test).
///
/// (`body` returns nothing: a closure whose only `try` is inside `#expect` is then still known
/// to throw, which a generic result type would lose.)
package func withResource<Resource: ScopedResource>(
    _ resource: Resource,
    _ body: (Resource) async throws -> Void
) async throws {
    let failure: (any Error)? = await withDiscardingTaskGroup { group in
        group.addTask { await resource.run() }
        let failure: (any Error)?
        do {
            try await body(resource)
            failure = nil
        } catch {
            failure = error
        }
        await resource.cleanUp()
        return failure
    }
    if let failure {
        throw failure
    }
}

extension GatewayHarness: ScopedResource {
    package func run() async { await self.server.run() }
    package func cleanUp() async { await self.stop() }
}

extension UpstreamHarness: ScopedResource {
    package func cleanUp() async { await self.stop() }
}

extension MockAPNsServer: ScopedResource {
    package func cleanUp() async { await self.close() }
}

extension GatewayServer: ScopedResource {
    // `run()` is the server's own.
    package func cleanUp() async { await self.close() }
}

extension FeedbackServer: ScopedResource {
    package func cleanUp() async { await self.close() }
}

import BridgeServer
import MockAPNs

/// Something a test starts and must stop before it ends: a harness, a listener, a mock APNs, a
/// child process. ``withResource(_:_:)`` runs a test's body with one and awaits its cleanup.
package protocol ScopedResource: Sendable {
    /// What must run while the resource is in use (a listener's connection work); it returns
    /// once ``cleanUp()`` has stopped the resource. Nothing by default.
    func run() async

    /// Stops what the resource started; returns when it has stopped.
    func cleanUp() async
}

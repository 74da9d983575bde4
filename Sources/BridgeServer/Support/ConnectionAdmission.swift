import CoreMetrics
import NIOCore
import NIOTLS
import Synchronization

/// What a legacy listener admits: open connections, and connections still in their TLS
/// handshake, globally and per source address.
///
/// A connection counts as handshaking from its accept until its handshake completes (or it
/// closes). Unauthenticated sockets are bounded separately from providers: a flood of stalled
/// or half-sent handshakes, which could otherwise sit out the handshake timeout on every slot of
/// the connection cap, is refused at accept while providers with certificates still get in.
package struct ConnectionAdmission: Sendable, Hashable {
    /// Open connections, authenticated or not.
    var maximumConnections: Int
    /// Connections accepted whose TLS handshake has not completed yet.
    var maximumHandshakes: Int
    /// The same, from one source address (the IP address, without the port).
    var maximumHandshakesPerAddress: Int

    package init(maximumConnections: Int, maximumHandshakes: Int, maximumHandshakesPerAddress: Int) {
        self.maximumConnections = maximumConnections
        self.maximumHandshakes = maximumHandshakes
        self.maximumHandshakesPerAddress = maximumHandshakesPerAddress
    }
}

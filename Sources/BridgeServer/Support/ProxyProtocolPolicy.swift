import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// Which peers of a legacy listener are load balancers that write a PROXY protocol header
/// before the client's bytes (docs/scaling.md#proxy-protocol). Off (no networks) by default.
///
/// A connection from inside these networks must start with a header (version 1 or 2); the
/// client address it carries then stands for the connection everywhere the bridge names a
/// peer: the per-address handshake bound, logs, and the migration view's source addresses. A
/// connection from anywhere else is read as TLS from its first byte, so a PROXY header from a
/// peer that is not a configured load balancer fails its handshake: nobody else can claim an
/// address.
package struct ProxyProtocolPolicy: Sendable, Hashable, CustomStringConvertible {
    package var loadBalancers: [IPNetwork]

    package init(loadBalancers: [IPNetwork] = []) {
        self.loadBalancers = loadBalancers
    }

    package static let off = ProxyProtocolPolicy()

    /// `off`, or the networks (for the start-up log).
    package var description: String {
        self.loadBalancers.isEmpty ? "off" : self.loadBalancers.map(\.description).joined(separator: ",")
    }

    /// Whether a connection from `peer` must begin with a PROXY protocol header.
    package func expectsHeader(from peer: SocketAddress?) -> Bool {
        guard !self.loadBalancers.isEmpty, let peer else { return false }
        return self.loadBalancers.contains { $0.contains(peer) }
    }
}

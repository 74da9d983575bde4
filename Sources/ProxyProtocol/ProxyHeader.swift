import NIOCore

/// The PROXY protocol header a TCP load balancer writes before the client's first byte
/// (HAProxy's `send-proxy` for version 1, `send-proxy-v2` for version 2): where the connection
/// really came from (docs/scaling.md#proxy-protocol).
package struct ProxyHeader: Hashable, Sendable {
    package enum Version: Int, Hashable, Sendable {
        case one = 1
        case two = 2
    }

    package var version: Version
    /// The client's address and port, as the load balancer saw them; `nil` for a header that
    /// names none (version 1 `UNKNOWN`, version 2 `LOCAL` such as a health check, or an address
    /// family other than IPv4 and IPv6): the connection's own peer address then stands.
    package var source: SocketAddress?

    package init(version: Version, source: SocketAddress?) {
        self.version = version
        self.source = source
    }
}

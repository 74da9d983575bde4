import NIOCore

/// The PROXY protocol header a TCP load balancer writes before the client's first byte
/// (HAProxy's `send-proxy` for version 1, `send-proxy-v2` for version 2): where the connection
/// really came from (docs/scaling.md#proxy-protocol).
public struct ProxyHeader: Hashable, Sendable {
    public enum Version: Int, Hashable, Sendable {
        case one = 1
        case two = 2
    }

    public var version: Version
    /// The client's address and port, as the load balancer saw them; `nil` for a header that
    /// names none (version 1 `UNKNOWN`, version 2 `LOCAL` such as a health check, or an address
    /// family other than IPv4 and IPv6): the connection's own peer address then stands.
    public var source: SocketAddress?

    public init(version: Version, source: SocketAddress?) {
        self.version = version
        self.source = source
    }
}

/// Why a PROXY protocol header was refused. The connection is closed without an answer: the
/// bytes came from a load balancer that is misconfigured, or from a peer that is not one.
public enum ProxyHeaderError: Error, Hashable, Sendable {
    /// The first bytes are neither version 1's `PROXY ` nor version 2's signature.
    case missing
    /// Version 1: no CRLF within 107 bytes, a protocol other than TCP4/TCP6/UNKNOWN, an address
    /// or port that does not parse, or the wrong number of fields.
    case malformedVersion1(String)
    /// Version 2: a version other than 2, a command other than LOCAL or PROXY, an address block
    /// shorter than its family needs, or a length above ``ProxyHeaderParser/maximumVersion2Length``.
    case malformedVersion2(String)
}

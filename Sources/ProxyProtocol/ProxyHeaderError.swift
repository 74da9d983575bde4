import NIOCore

/// Why a PROXY protocol header was refused. The connection is closed without an answer: the
/// bytes came from a load balancer that is misconfigured, or from a peer that is not one.
package enum ProxyHeaderError: Error, Hashable, Sendable {
    /// The first bytes are neither version 1's `PROXY ` nor version 2's signature.
    case missing
    /// Version 1: no CRLF within 107 bytes, a protocol other than TCP4/TCP6/UNKNOWN, an address
    /// or port that does not parse, or the wrong number of fields.
    case malformedVersion1(String)
    /// Version 2: a version other than 2, a command other than LOCAL or PROXY, an address block
    /// shorter than its family needs, or a length above ``ProxyHeaderParser/maximumVersion2Length``.
    case malformedVersion2(String)
}

import NIOCore

extension SocketAddress {
    /// The address as people write it, for logs and what the commands print: `127.0.0.1:2195`,
    /// `[::1]:2195`, `unix:/path`. (NIO's description, `[IPv4]127.0.0.1/127.0.0.1:2195`, is a
    /// debugging form.)
    package var hostAndPort: String {
        switch self {
        case .v4: "\(self.ipAddress ?? "?"):\(self.port ?? 0)"
        case .v6: "[\(self.ipAddress ?? "?")]:\(self.port ?? 0)"
        case .unixDomainSocket: "unix:\(self.pathname ?? "")"
        }
    }
}

extension Optional where Wrapped == SocketAddress {
    /// ``SocketAddress/hostAndPort``, or `?` when there is none.
    package var hostAndPort: String {
        self.map(\.hostAndPort) ?? "?"
    }
}

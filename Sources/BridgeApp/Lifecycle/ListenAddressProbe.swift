import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// Checks, before anything is opened, that each listen address can be bound: a socket is bound
/// to it (with `SO_REUSEADDR`, as the listeners bind) and closed again, without `listen()`, so no
/// client can connect to it meanwhile. A port that another process listens on fails here, before
/// the store is opened or any other listener is up (docs/operations.md#refusing-to-start). Port 0 (any free port)
/// always binds and is not probed.
enum ListenAddressProbe {
    /// - Throws: ``ConfigurationError`` naming `key` and the address.
    static func check(_ key: String, host: String, port: Int) throws {
        guard port != 0 else { return }
        let display = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        let address: SocketAddress
        do {
            address = try SocketAddress.makeAddressResolvingHost(host, port: port)
        } catch {
            throw ConfigurationError(key: key, "cannot listen on \(display): \(error)")
        }
        let family: Int32 =
            switch address {
            case .v4: AF_INET
            case .v6: AF_INET6
            case .unixDomainSocket: AF_UNIX
            }
        let descriptor = socket(family, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return }  // no socket to probe with: the real bind will tell
        defer { close(descriptor) }
        var on: Int32 = 1
        _ = setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        let result = address.withSockAddr { pointer, length in
            bind(descriptor, pointer, socklen_t(length))
        }
        if result != 0 {
            let reason = String(cString: strerror(errno))
            throw ConfigurationError(key: key, "cannot listen on \(display): \(reason)")
        }
    }
}

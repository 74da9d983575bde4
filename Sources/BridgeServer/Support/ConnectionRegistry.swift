import CoreMetrics
import NIOCore
import NIOTLS
import Synchronization

/// The open connections of a listener, shared with its child channel initializer before the
/// server object exists: admission against the limits, and the list to close on shutdown.
package final class ConnectionRegistry: Sendable {
    package enum Refusal: String {
        case shuttingDown = "shutting_down"
        case connections
        case handshakes
        case handshakesPerAddress = "handshakes_per_address"
    }

    private struct Connections {
        var channels: [ObjectIdentifier: any Channel] = [:]
        /// Channels still in their handshake, with their source address.
        var handshaking: [ObjectIdentifier: String] = [:]
        var handshakingPerAddress: [String: Int] = [:]
        var isShuttingDown = false

        mutating func handshakeEnded(_ id: ObjectIdentifier) {
            guard let address = self.handshaking.removeValue(forKey: id), address != ConnectionRegistry.unattributed
            else { return }
            let remaining = self.handshakingPerAddress[address, default: 1] - 1
            self.handshakingPerAddress[address] = remaining > 0 ? remaining : nil
        }
    }

    private let connections = Mutex(Connections())
    private let gauge: Meter?

    package init(gauge: Meter? = nil) {
        self.gauge = gauge
    }

    package var count: Int {
        self.connections.withLock { $0.channels.count }
    }

    /// Connections whose handshake has not completed.
    package var handshakingCount: Int {
        self.connections.withLock { $0.handshaking.count }
    }

    /// The same, counted against one source address.
    package func handshakingCount(from address: String) -> Int {
        self.connections.withLock { $0.handshakingPerAddress[address, default: 0] }
    }

    /// Registers the channel as handshaking (and unregisters it when it closes), unless the
    /// listener is shutting down or a limit is reached: then the refusal says which.
    ///
    /// - Parameter attributed: whether the channel's peer is its client. A connection from a
    ///   load balancer (PROXY protocol) is not: it counts against the per-address bound only
    ///   once ``attribute(_:to:limits:)`` names its client.
    package func admit(_ channel: any Channel, limits: ConnectionAdmission, attributed: Bool = true) -> Refusal? {
        let id = ObjectIdentifier(channel)
        let address = Self.sourceAddress(of: channel.remoteAddress)
        let refusal: Refusal? = self.connections.withLock { connections in
            if connections.isShuttingDown { return .shuttingDown }
            if connections.channels.count >= limits.maximumConnections { return .connections }
            if connections.handshaking.count >= limits.maximumHandshakes { return .handshakes }
            if attributed, connections.handshakingPerAddress[address, default: 0] >= limits.maximumHandshakesPerAddress
            {
                return .handshakesPerAddress
            }
            connections.channels[id] = channel
            connections.handshaking[id] = attributed ? address : Self.unattributed
            if attributed { connections.handshakingPerAddress[address, default: 0] += 1 }
            return nil
        }
        if refusal == nil {
            self.gauge?.increment()
            channel.closeFuture.whenComplete { _ in
                self.connections.withLock { connections in
                    connections.handshakeEnded(id)
                    _ = connections.channels.removeValue(forKey: id)
                }
                self.gauge?.decrement()
            }
        }
        return refusal
    }

    /// The client behind a load balancer, as its PROXY header names it: from now on the channel
    /// counts against that address's handshake bound, unless the bound is reached (then the
    /// refusal, and the caller closes the channel).
    func attribute(_ channel: any Channel, to client: SocketAddress?, limits: ConnectionAdmission) -> Refusal? {
        let id = ObjectIdentifier(channel)
        let address = Self.sourceAddress(of: client)
        return self.connections.withLock { connections in
            guard connections.handshaking[id] == Self.unattributed else { return nil }
            if connections.handshakingPerAddress[address, default: 0] >= limits.maximumHandshakesPerAddress {
                return .handshakesPerAddress
            }
            connections.handshaking[id] = address
            connections.handshakingPerAddress[address, default: 0] += 1
            return nil
        }
    }

    /// The channel's TLS handshake completed: it no longer counts against the handshake limits.
    func handshakeCompleted(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        self.connections.withLock { $0.handshakeEnded(id) }
    }

    /// The connections open now.
    var openChannels: [any Channel] {
        self.connections.withLock { Array($0.channels.values) }
    }

    /// Admits no more connections; returns the open ones.
    func closeAdmission() -> [any Channel] {
        self.connections.withLock { connections in
            connections.isShuttingDown = true
            return Array(connections.channels.values)
        }
    }

    /// The address without its port: one client's connections share it.
    private static func sourceAddress(of address: SocketAddress?) -> String {
        address?.ipAddress ?? "unknown"
    }

    /// A handshaking connection whose client a PROXY header has yet to name: in no address's count.
    private static let unattributed = ""
}

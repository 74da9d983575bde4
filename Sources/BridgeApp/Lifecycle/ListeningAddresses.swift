import BridgeServer
import NIOCore

/// Where the listeners of a running bridge are bound.
package struct ListeningAddresses: Sendable {
    package var gateway: SocketAddress
    package var feedback: SocketAddress
    /// `nil` when the admin port is off.
    package var admin: SocketAddress?
}

extension ListeningAddresses {
    /// One listener bound, as its ``ListenerService`` reports it.
    package enum Listener: Sendable {
        case gateway(SocketAddress)
        case feedback(SocketAddress)
        case admin(SocketAddress)
    }

    /// The addresses reported so far; complete once the gateway, the feedback service and,
    /// when it is on, the admin port have reported.
    struct Collector {
        var expectsAdmin: Bool
        private var gateway: SocketAddress?
        private var feedback: SocketAddress?
        private var admin: SocketAddress?

        init(expectsAdmin: Bool) {
            self.expectsAdmin = expectsAdmin
        }

        /// Every address, once the last listener has reported.
        mutating func add(_ listener: Listener) -> ListeningAddresses? {
            switch listener {
            case .gateway(let address): self.gateway = address
            case .feedback(let address): self.feedback = address
            case .admin(let address): self.admin = address
            }
            guard let gateway = self.gateway, let feedback = self.feedback, !self.expectsAdmin || self.admin != nil
            else { return nil }
            return ListeningAddresses(gateway: gateway, feedback: feedback, admin: self.admin)
        }
    }
}

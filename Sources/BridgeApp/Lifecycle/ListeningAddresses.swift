import BridgeServer
import NIOCore
import Synchronization

/// Where the listeners of a running bridge are bound.
package struct ListeningAddresses: Sendable {
    package var gateway: SocketAddress
    package var feedback: SocketAddress
    /// `nil` when the admin port is off.
    package var admin: SocketAddress?
}

import BridgeServer
import NIOCore
import Synchronization

/// Where the listeners of a running bridge are bound.
public struct ListeningAddresses: Sendable {
    public var gateway: SocketAddress
    public var feedback: SocketAddress
    /// `nil` when the admin port is off.
    public var admin: SocketAddress?
}

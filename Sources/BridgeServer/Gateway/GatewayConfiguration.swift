import BridgeCore
import NIOCore
import NIOSSL

/// How the gateway listener (default port 2195) behaves.
package struct GatewayConfiguration: Sendable {
    package var host: String = "0.0.0.0"
    package var port: Int = 2195
    package var tls: LegacyTLSConfiguration
    /// swift-nio-ssl has no handshake timeout of its own: a connection that has not finished its
    /// handshake by then is closed.
    package var handshakeTimeout: TimeAmount = .seconds(10)
    /// A connection that sent nothing for this long after its handshake, with nothing in flight,
    /// is closed.
    package var idleTimeout: TimeAmount? = .minutes(60)
    /// Connections beyond this are closed as soon as they are accepted.
    package var maximumConnections: Int = 10_000
    /// Connections still in their TLS handshake beyond this are closed as soon as they are
    /// accepted, so unauthenticated sockets cannot crowd out providers (docs/operations.md).
    package var maximumHandshakes: Int = 512
    /// The same bound for one source address.
    package var maximumHandshakesPerAddress: Int = 64
    /// The load balancers whose connections begin with a PROXY protocol header naming the
    /// client (docs/scaling.md#proxy-protocol); off by default.
    package var proxyProtocol: ProxyProtocolPolicy = .off
    package var session = ProviderSessionStateMachine.Configuration()
    /// After an error-response: how long to keep reading (and dropping) before close_notify, so
    /// that a reset does not destroy the packet on its way and a client reading a little late
    /// gets the packet without the close beside it (docs/protocol.md#closing). A tenant may
    /// have its own (``ClosingOverrides``).
    package var errorDrainTime: TimeAmount = .milliseconds(500)
    /// On shutdown: how long in-flight notifications may take before status 10 is sent (docs/protocol.md#shutdown).
    package var shutdownGracePeriod: TimeAmount = .seconds(10)

    /// How long a farewell may take beyond the grace period before it is written anyway, and
    /// again before a connection still open is closed by force (docs/protocol.md#shutdown).
    var shutdownMargin: TimeAmount { self.errorDrainTime + .seconds(2) }

    /// The most ``GatewayServer/shutdownGracefully()`` takes: the grace period and two margins.
    package var shutdownBound: TimeAmount { self.shutdownGracePeriod + self.shutdownMargin + self.shutdownMargin }

    package init(tls: LegacyTLSConfiguration) {
        self.tls = tls
    }

    var admission: ConnectionAdmission {
        ConnectionAdmission(
            maximumConnections: self.maximumConnections,
            maximumHandshakes: self.maximumHandshakes,
            maximumHandshakesPerAddress: self.maximumHandshakesPerAddress
        )
    }
}

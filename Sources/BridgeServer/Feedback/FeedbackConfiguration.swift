import BridgeCore
import NIOCore

/// How the feedback listener (default port 2196) behaves (docs/feedback.md).
package struct FeedbackConfiguration: Sendable {
    package var host: String = "0.0.0.0"
    package var port: Int = 2196
    /// The same TLS rules as the gateway: client certificates requested and required.
    package var tls: LegacyTLSConfiguration
    package var handshakeTimeout: TimeAmount = .seconds(10)
    /// A poller that does not take a batch within this time is disconnected; what it did take
    /// is deleted, the rest stays pending.
    package var writeTimeout: TimeAmount = .seconds(60)
    /// Connections beyond this are closed as soon as they are accepted.
    package var maximumConnections: Int = 1000
    /// Connections still in their TLS handshake, in all and from one source address, beyond
    /// which new ones are closed as soon as they are accepted.
    package var maximumHandshakes: Int = 256
    package var maximumHandshakesPerAddress: Int = 32
    /// The load balancers whose connections begin with a PROXY protocol header naming the
    /// client (docs/scaling.md#proxy-protocol); off by default.
    package var proxyProtocol: ProxyProtocolPolicy = .off
    /// A poll whose next batch the store has not given within this is closed: a store that
    /// does not answer (a PostgreSQL restart) must not hold a poller without data or a close
    /// (docs/operations.md#store-outage). What the poller took is deleted; the rest stays
    /// pending for its next poll.
    package var storeTimeout: TimeAmount = .seconds(10)
    /// After the last tuple, how long the poller has to close first before the bridge sends
    /// close_notify: a reader that reads up to this late gets its last tuple without the close
    /// beside it, which Go's TLS would return together and both Go libraries then drop
    /// (docs/protocol.md#closing). An empty list closes at once.
    package var closeDelay: TimeAmount = .seconds(2)
    /// Batch size, and the 38-byte-tuple option (tokens that are not 32 bytes are left out).
    package var drain = FeedbackDrainOptions()

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

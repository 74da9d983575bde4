import NIOCore

/// Sent down a gateway connection's pipeline to start the graceful shutdown of docs/protocol.md#shutdown.
package struct GatewayShutdownEvent: Sendable {
    var gracePeriod: TimeAmount

    package init(gracePeriod: TimeAmount) {
        self.gracePeriod = gracePeriod
    }
}

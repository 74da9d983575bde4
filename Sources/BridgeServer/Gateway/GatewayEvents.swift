import NIOCore

/// Sent down a gateway connection's pipeline to start the graceful shutdown of docs/protocol.md#shutdown.
package struct GatewayShutdownEvent: Sendable {
    var gracePeriod: TimeAmount

    package init(gracePeriod: TimeAmount) {
        self.gracePeriod = gracePeriod
    }
}

/// Sent down a gateway connection's pipeline after a configuration reload: a connection whose
/// certificate no longer resolves to a tenant closes as at shutdown.
struct GatewayTenantReviewEvent: Sendable {
    var gracePeriod: TimeAmount
    /// The upstream credentials that remain.
    var credentials: Set<String>
}

import NIOCore

/// Sent down a gateway connection's pipeline after a configuration reload: a connection whose
/// certificate no longer resolves to a tenant closes as at shutdown.
struct GatewayTenantReviewEvent: Sendable {
    var gracePeriod: TimeAmount
    /// The upstream credentials that remain.
    var credentials: Set<String>
}

/// Sent down a gateway connection's pipeline when the shutdown's bound passed with the
/// connection still open (docs/protocol.md#shutdown): a farewell still waiting for its resend
/// records, or for its grace timer, goes out now.
struct GatewayShutdownDeadlineEvent: Sendable {}

import NIOCore

/// Sent down a gateway connection's pipeline after a configuration reload: a connection whose
/// certificate no longer resolves to a tenant closes as at shutdown.
struct GatewayTenantReviewEvent: Sendable {
    var gracePeriod: TimeAmount
    /// The upstream credentials that remain.
    var credentials: Set<String>
}

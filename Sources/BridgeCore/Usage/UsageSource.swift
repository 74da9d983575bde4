import Foundation

/// Usage as kept: the store of a running bridge, or a reader of a stopped (or running) bridge's
/// store for `apns-bridge report`.
public protocol UsageSource: Sendable {
    /// The usage of the days from `firstDay` on (all tenants, or one).
    func usage(from firstDay: UsageDay, tenant: String?) async throws -> StoredUsage
}

import Synchronization

/// Until when each tenant may hold live resend records (docs/protocol.md#resend-records, last sentence): what
/// lets a notification skip the digest and the store.
///
/// A horizon only moves forward: remembering records extends it to their expiry, and a store
/// shared by several instances extends it with what it reads from the others. A tenant with no
/// horizon, or one in the past, has no live record, so its notifications are new.
public final class ResendRecordHorizons: Sendable {
    /// UNIX (or any monotonic) milliseconds, per tenant.
    private let horizons = Mutex<[String: Int64]>([:])

    public init() {}

    /// Records of `tenant` may be live until `milliseconds`.
    public func extend(tenant: String, until milliseconds: Int64) {
        self.horizons.withLock { horizons in
            if let current = horizons[tenant], current >= milliseconds { return }
            horizons[tenant] = milliseconds
        }
    }

    public func mayHoldLiveRecords(tenant: String, now milliseconds: Int64) -> Bool {
        self.horizons.withLock { horizons in
            guard let horizon = horizons[tenant] else { return false }
            if horizon < milliseconds {
                horizons[tenant] = nil  // past: forget it, so the map holds live tenants only
                return false
            }
            return true
        }
    }
}

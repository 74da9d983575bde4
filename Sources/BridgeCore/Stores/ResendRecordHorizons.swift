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
    /// How many tenants have a horizon, written under the lock: while it is 0 (no error or
    /// shutdown within the window, the normal case) a notification is answered without the
    /// lock, the tenant's hash or a clock read.
    private let count = Atomic<Int>(0)

    public init() {}

    /// Records of `tenant` may be live until `milliseconds`.
    public func extend(tenant: String, until milliseconds: Int64) {
        self.horizons.withLock { horizons in
            if let current = horizons[tenant], current >= milliseconds { return }
            horizons[tenant] = milliseconds
            self.count.store(horizons.count, ordering: .releasing)
        }
    }

    /// `now` (milliseconds on the horizons' clock) is read only when some tenant has a horizon.
    public func mayHoldLiveRecords(tenant: String, now: () -> Int64) -> Bool {
        guard self.count.load(ordering: .acquiring) > 0 else { return false }
        let milliseconds = now()
        return self.horizons.withLock { horizons in
            guard let horizon = horizons[tenant] else { return false }
            if horizon < milliseconds {
                horizons[tenant] = nil  // past: forget it, so the map holds live tenants only
                self.count.store(horizons.count, ordering: .releasing)
                return false
            }
            return true
        }
    }
}

import Foundation

/// The usage a store holds (``UsageStore/usage(from:tenant:)``), as read: the report and the
/// status page make their rows from it (``MigrationReport``).
public struct StoredUsage: Hashable, Sendable {
    public struct Backlog: Hashable, Sendable {
        /// Tokens waiting on the tenant's feedback lists (both environments).
        public var tokens: Int
        /// When the oldest of them was recorded (UNIX seconds).
        public var oldestRecorded: Int64?

        public init(tokens: Int, oldestRecorded: Int64?) {
            self.tokens = tokens
            self.oldestRecorded = oldestRecorded
        }
    }

    /// Per tenant, day and counter.
    public var counts: [UsageBatch.CountKey: Int64] = [:]
    /// Per tenant: distinct source addresses over the days read.
    public var distinctAddresses: [String: Int] = [:]
    /// Per tenant: first and last seen, last poll (over the whole retention, not only the days
    /// read).
    public var tenants: [String: UsageBatch.TenantTimes] = [:]
    /// Per tenant: the provider certificates seen, newest sighting first.
    public var certificates: [String: [UsageBatch.CertificateSighting]] = [:]
    /// Per tenant: the feedback backlog now.
    public var backlogs: [String: Backlog] = [:]

    public init() {}

    /// Every tenant the store knows of.
    public var tenantNames: Set<String> {
        Set(self.counts.keys.map(\.tenant)).union(self.tenants.keys).union(self.certificates.keys).union(
            self.backlogs.keys
        )
    }

    /// The same usage with every value in range. What a store holds is read as data, not
    /// trusted: a tampered or corrupted store (a counter at INT64_MAX, a negative count, a
    /// timestamp at either extreme) must not trap the report, the status page or the gauges of
    /// a running gateway. Counts become at least 0; timestamps 0 up to the end of year 9999.
    public var sanitized: StoredUsage {
        var clean = self
        clean.counts = self.counts.mapValues { max($0, 0) }
        clean.distinctAddresses = self.distinctAddresses.mapValues { max($0, 0) }
        clean.tenants = self.tenants.mapValues { times in
            var times = times
            times.firstSeen = times.firstSeen.map(UsageTimestamp.clamped)
            times.lastSeen = times.lastSeen.map(UsageTimestamp.clamped)
            times.lastPoll = times.lastPoll.map(UsageTimestamp.clamped)
            return times
        }
        clean.certificates = self.certificates.mapValues { $0.map(\.sanitized) }
        clean.backlogs = self.backlogs.mapValues {
            Backlog(tokens: max($0.tokens, 0), oldestRecorded: $0.oldestRecorded.map(UsageTimestamp.clamped))
        }
        return clean
    }
}

import Foundation

/// A UTC calendar day, as days since 1970-01-01: the unit usage is kept in.
public struct UsageDay: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var number: Int

    public init(number: Int) {
        self.number = number
    }

    /// The day `unixSeconds` falls on (UTC).
    public init(unixSeconds: Int64) {
        self.number = Int((Double(unixSeconds) / 86_400).rounded(.down))
    }

    public init(_ date: Date) {
        self.init(unixSeconds: Int64(date.timeIntervalSince1970.rounded(.down)))
    }

    public var start: Date { Date(timeIntervalSince1970: TimeInterval(self.number) * 86_400) }

    /// `2026-11-25`.
    public var description: String {
        self.start.formatted(Date.ISO8601FormatStyle().year().month().day())
    }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.number < rhs.number }
}

/// The names of the per-day counters in the store. One table holds them all, so a new kind of
/// figure needs no schema change.
public enum UsageCounter {
    /// Notifications received in a frame of this command (0, 1 or 2).
    public static func command(_ command: UInt8) -> String { "command.\(command)" }
    /// Notifications APNs accepted (200) that were not broadcasts.
    public static let accepted = "accepted"
    /// Notifications to a Live Activity channel token that APNs accepted.
    public static let broadcast = "broadcast"
    /// Notifications APNs answered 410: no error-response, the token went to the feedback list.
    public static let unregistered = "unregistered"
    /// Notifications given up after 429s: the provider was told nothing.
    public static let dropped = "dropped"
    /// Notifications that failed with this legacy status (an error-response, when the frame's
    /// command can carry one).
    public static func status(_ status: UInt8) -> String { "status.\(status)" }
    /// Provider connections whose handshake negotiated this TLS version (`TLSv1.2`, `TLSv1.3`).
    public static func tls(_ version: String) -> String { "tls.\(version)" }
    /// Feedback polls (connections to the feedback port that were served).
    public static let feedbackPolls = "feedback.polls"
    /// Feedback tuples delivered to pollers.
    public static let feedbackTuples = "feedback.tuples"
}

/// A provider certificate seen at a handshake.
public struct SeenCertificate: Hashable, Sendable {
    /// Lowercase hex SHA-256 of the certificate.
    public var fingerprint: String
    /// The subject as a distinguished name (`UID=com.example.app, CN=…`).
    public var subject: String
    /// UNIX seconds.
    public var notAfter: Int64

    public init(fingerprint: String, subject: String, notAfter: Int64) {
        self.fingerprint = fingerprint
        self.subject = subject
        self.notAfter = notAfter
    }
}

/// What the bridge saw of its tenants since the last write to the store: counts to add per
/// tenant and day, and times to keep (first and last seen, last feedback poll). Several
/// instances write their batches into one store, and the counts add up.
public struct UsageBatch: Hashable, Sendable {
    public struct CountKey: Hashable, Sendable {
        public var tenant: String
        public var day: UsageDay
        public var counter: String

        public init(tenant: String, day: UsageDay, counter: String) {
            self.tenant = tenant
            self.day = day
            self.counter = counter
        }
    }

    public struct AddressKey: Hashable, Sendable {
        public var tenant: String
        public var day: UsageDay
        public var address: String

        public init(tenant: String, day: UsageDay, address: String) {
            self.tenant = tenant
            self.day = day
            self.address = address
        }
    }

    public struct CertificateKey: Hashable, Sendable {
        public var tenant: String
        public var fingerprint: String

        public init(tenant: String, fingerprint: String) {
            self.tenant = tenant
            self.fingerprint = fingerprint
        }
    }

    /// When a tenant was first and last seen (UNIX seconds) on the gateway, and when its
    /// feedback list was last polled.
    public struct TenantTimes: Hashable, Sendable {
        public var firstSeen: Int64?
        public var lastSeen: Int64?
        public var lastPoll: Int64?

        public init(firstSeen: Int64? = nil, lastSeen: Int64? = nil, lastPoll: Int64? = nil) {
            self.firstSeen = firstSeen
            self.lastSeen = lastSeen
            self.lastPoll = lastPoll
        }

        public mutating func merge(_ other: Self) {
            self.firstSeen = Self.pick(self.firstSeen, other.firstSeen, by: min)
            self.lastSeen = Self.pick(self.lastSeen, other.lastSeen, by: max)
            self.lastPoll = Self.pick(self.lastPoll, other.lastPoll, by: max)
        }

        private static func pick(_ a: Int64?, _ b: Int64?, by choose: (Int64, Int64) -> Int64) -> Int64? {
            guard let a else { return b }
            guard let b else { return a }
            return choose(a, b)
        }
    }

    /// A certificate with when it was seen (UNIX seconds).
    public struct CertificateSighting: Hashable, Sendable {
        public var certificate: SeenCertificate
        public var firstSeen: Int64
        public var lastSeen: Int64

        public init(certificate: SeenCertificate, firstSeen: Int64, lastSeen: Int64) {
            self.certificate = certificate
            self.firstSeen = firstSeen
            self.lastSeen = lastSeen
        }
    }

    public var counts: [CountKey: Int64] = [:]
    public var addresses: Set<AddressKey> = []
    public var certificates: [CertificateKey: CertificateSighting] = [:]
    public var tenants: [String: TenantTimes] = [:]

    public init() {}

    public var isEmpty: Bool {
        self.counts.isEmpty && self.addresses.isEmpty && self.certificates.isEmpty && self.tenants.isEmpty
    }

    public mutating func add(_ value: Int64, to counter: String, tenant: String, day: UsageDay) {
        guard value != 0 else { return }
        self.counts[CountKey(tenant: tenant, day: day, counter: counter), default: 0] += value
    }

    public mutating func saw(_ tenant: String, _ times: TenantTimes) {
        self.tenants[tenant, default: TenantTimes()].merge(times)
    }

    public mutating func saw(_ certificate: SeenCertificate, tenant: String, at time: Int64) {
        let key = CertificateKey(tenant: tenant, fingerprint: certificate.fingerprint)
        self.merge(sighting: CertificateSighting(certificate: certificate, firstSeen: time, lastSeen: time), key: key)
    }

    /// Adds `other` (a batch whose write failed, put back to be written with the next one).
    public mutating func merge(_ other: UsageBatch) {
        for (key, value) in other.counts {
            self.counts[key, default: 0] += value
        }
        self.addresses.formUnion(other.addresses)
        for (key, sighting) in other.certificates {
            self.merge(sighting: sighting, key: key)
        }
        for (tenant, times) in other.tenants {
            self.saw(tenant, times)
        }
    }

    private mutating func merge(sighting: CertificateSighting, key: CertificateKey) {
        if var existing = self.certificates[key] {
            existing.firstSeen = min(existing.firstSeen, sighting.firstSeen)
            existing.lastSeen = max(existing.lastSeen, sighting.lastSeen)
            self.certificates[key] = existing
        } else {
            self.certificates[key] = sighting
        }
    }

    /// Rows a store writes for this batch (for a log line).
    public var rowCount: Int {
        self.counts.count + self.addresses.count + self.certificates.count + self.tenants.count
    }
}

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

/// UNIX seconds as the migration view shows them.
public enum UsageTimestamp {
    /// 9999-12-31T23:59:59Z: the last second a date formatter is asked to show.
    public static let latest: Int64 = 253_402_300_799

    /// `value` within 0 ... ``latest``.
    public static func clamped(_ value: Int64) -> Int64 {
        min(max(value, 0), Self.latest)
    }
}

extension UsageBatch.CertificateSighting {
    /// Its timestamps within range (``UsageTimestamp/clamped(_:)``).
    public var sanitized: Self {
        var sighting = self
        sighting.firstSeen = UsageTimestamp.clamped(self.firstSeen)
        sighting.lastSeen = UsageTimestamp.clamped(self.lastSeen)
        sighting.certificate.notAfter = UsageTimestamp.clamped(self.certificate.notAfter)
        return sighting
    }
}

extension Int64 {
    /// `self + other`, held at `Int64.max` (or `.min`) instead of trapping.
    public func addingSaturated(_ other: Int64) -> Int64 {
        let (sum, overflow) = self.addingReportingOverflow(other)
        guard overflow else { return sum }
        return other > 0 ? .max : .min
    }
}

/// Usage as kept: the store of a running bridge, or a reader of a stopped (or running) bridge's
/// store for `apns-bridge report`.
public protocol UsageSource: Sendable {
    /// The usage of the days from `firstDay` on (all tenants, or one).
    func usage(from firstDay: UsageDay, tenant: String?) async throws -> StoredUsage
}

/// Where usage lasts: the bridge's store (``UsageRecorder`` batches are written there), read by
/// `apns-bridge report` and the status page.
public protocol UsageStore: UsageSource {
    /// Adds a batch: counts add to what is there (several instances add up), times keep the
    /// earliest first and the latest last sighting.
    func recordUsage(_ batch: UsageBatch) async throws
}

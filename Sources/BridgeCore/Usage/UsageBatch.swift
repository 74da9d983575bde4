import Foundation

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

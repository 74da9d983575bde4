import Foundation

/// The migration view (`apns-bridge report`, the status page's "Migration" section): one row per
/// tenant over the last days, with a line in plain language saying what stands between it and
/// the end of the migration, sorted so that the tenants blocking the end come first.
public struct MigrationReport: Hashable, Sendable {
    /// A tenant that sent nothing and polled nothing for this many days is ready to retire.
    public static let quietDays = 30
    /// A backlog not polled for this many days is a cron job that stopped (the alert fires
    /// after 48 hours too).
    public static let unpolledDays = 2
    /// A provider certificate within this many days of its end is named.
    public static let certificateWarningDays = 30
    /// Certificates seen within this many days of a tenant's latest sighting are in use (older
    /// ones were replaced).
    public static let certificateInUseDays = 7

    public struct Certificate: Hashable, Sendable, Codable {
        public var subject: String
        public var fingerprint: String
        public var notAfter: Date
        public var lastSeen: Date
    }

    public struct Row: Hashable, Sendable, Codable {
        public var tenant: String
        /// Notifications with an outcome within the days of the report.
        public var notifications: Int64
        /// By the frame's command: `"0"`, `"1"`, `"2"`.
        public var byCommand: [String: Int64]
        public var accepted: Int64
        public var broadcast: Int64
        /// 410s: no error-response, the token went to the feedback list.
        public var unregistered: Int64
        public var dropped: Int64
        /// By legacy status (the error-response the provider got, or would have for command 0).
        public var failedByStatus: [String: Int64]
        /// Connections by TLS version negotiated.
        public var tlsVersions: [String: Int64]
        public var distinctSourceAddresses: Int
        public var firstSeen: Date?
        public var lastSeen: Date?
        public var feedbackPolls: Int64
        public var feedbackTuplesDelivered: Int64
        public var feedbackLastPoll: Date?
        public var feedbackBacklog: Int
        public var feedbackOldestEntry: Date?
        /// The provider certificates seen, newest sighting first.
        public var certificates: [Certificate]
        /// The earliest end among the certificates in use.
        public var certificateExpiry: Date?
        /// Notifications per day, oldest first (one value per day of the report).
        public var daily: [Int64]
        /// What stands between this tenant and the end of the migration, in plain language.
        public var verdict: String
        /// `false` when the tenant is ready to retire.
        public var blocking: Bool
        /// Sort rank: 0 needs attention, 1 still in use, 2 ready to retire.
        public var rank: Int
    }

    public var generated: Date
    public var firstDay: UsageDay
    public var days: Int
    public var rows: [Row]

    /// - Parameters:
    ///   - usage: what the store holds from `firstDay` (``UsageStore/usage(from:tenant:)``).
    ///   - knownTenants: the configured tenants: listed even when never seen.
    ///   - recent: what this process saw since its last write to the store (the status page).
    public init(
        usage: StoredUsage,
        days: Int,
        now: Date,
        knownTenants: [String] = [],
        recent: [String: UsageBatch.TenantTimes] = [:]
    ) {
        let usage = usage.sanitized
        let lastDay = UsageDay(now)
        let firstDay = UsageDay(number: lastDay.number - days + 1)
        self.generated = now
        self.firstDay = firstDay
        self.days = days
        let names = usage.tenantNames.union(knownTenants).union(recent.keys)
        self.rows = names.map {
            Self.row($0, usage: usage, firstDay: firstDay, lastDay: lastDay, now: now, recent: recent[$0])
        }
        .sorted { ($0.rank, -$0.notifications, $0.tenant) < ($1.rank, -$1.notifications, $1.tenant) }
    }

    private static func row(
        _ tenant: String,
        usage: StoredUsage,
        firstDay: UsageDay,
        lastDay: UsageDay,
        now: Date,
        recent: UsageBatch.TenantTimes?
    ) -> Row {
        var counters: [String: Int64] = [:]
        var daily = [Int64](repeating: 0, count: max(0, lastDay.number - firstDay.number + 1))
        for (key, value) in usage.counts where key.tenant == tenant && key.day >= firstDay && key.day <= lastDay {
            // Saturating: a count from the store may be anything up to INT64_MAX.
            counters[key.counter] = counters[key.counter, default: 0].addingSaturated(value)
            if key.counter.hasPrefix("command.") {
                daily[key.day.number - firstDay.number] = daily[key.day.number - firstDay.number].addingSaturated(value)
            }
        }
        func grouped(_ prefix: String) -> [String: Int64] {
            Dictionary(
                uniqueKeysWithValues: counters.filter { $0.key.hasPrefix(prefix) }.map {
                    (String($0.key.dropFirst(prefix.count)), $0.value)
                }
            )
        }
        let failed = grouped("status.")
        let accepted = counters[UsageCounter.accepted] ?? 0
        let broadcast = counters[UsageCounter.broadcast] ?? 0
        let unregistered = counters[UsageCounter.unregistered] ?? 0
        let dropped = counters[UsageCounter.dropped] ?? 0
        var times = usage.tenants[tenant] ?? .init()
        if let recent { times.merge(recent) }
        let sightings = usage.certificates[tenant] ?? []
        let certificates = sightings.map {
            Certificate(
                subject: $0.certificate.subject,
                fingerprint: $0.certificate.fingerprint,
                notAfter: Date(timeIntervalSince1970: TimeInterval($0.certificate.notAfter)),
                lastSeen: Date(timeIntervalSince1970: TimeInterval($0.lastSeen))
            )
        }
        let backlog = usage.backlogs[tenant] ?? .init(tokens: 0, oldestRecorded: nil)
        var row = Row(
            tenant: tenant,
            notifications: ([accepted, broadcast, unregistered, dropped] + failed.values).reduce(0) {
                $0.addingSaturated($1)
            },
            byCommand: grouped("command."),
            accepted: accepted,
            broadcast: broadcast,
            unregistered: unregistered,
            dropped: dropped,
            failedByStatus: failed,
            tlsVersions: grouped("tls."),
            distinctSourceAddresses: usage.distinctAddresses[tenant] ?? 0,
            firstSeen: times.firstSeen.map { Date(timeIntervalSince1970: TimeInterval($0)) },
            lastSeen: times.lastSeen.map { Date(timeIntervalSince1970: TimeInterval($0)) },
            feedbackPolls: counters[UsageCounter.feedbackPolls] ?? 0,
            feedbackTuplesDelivered: counters[UsageCounter.feedbackTuples] ?? 0,
            feedbackLastPoll: times.lastPoll.map { Date(timeIntervalSince1970: TimeInterval($0)) },
            feedbackBacklog: backlog.tokens,
            feedbackOldestEntry: backlog.oldestRecorded.map { Date(timeIntervalSince1970: TimeInterval($0)) },
            certificates: certificates,
            certificateExpiry: Self.certificateInUseExpiry(sightings),
            daily: daily,
            verdict: "",
            blocking: true,
            rank: 1
        )
        (row.verdict, row.blocking, row.rank) = Self.verdict(row, now: now)
        return row
    }

    /// The earliest end among the certificates seen within ``certificateInUseDays`` of the
    /// latest sighting: a replaced certificate stops counting a week after its successor came.
    public static func certificateInUseExpiry(_ sightings: [UsageBatch.CertificateSighting]) -> Date? {
        let sightings = sightings.map(\.sanitized)
        guard let latest = sightings.map(\.lastSeen).max() else { return nil }
        let inUse = sightings.filter { latest - $0.lastSeen <= Int64(Self.certificateInUseDays) * 86_400 }
        return inUse.map(\.certificate.notAfter).min().map { Date(timeIntervalSince1970: TimeInterval($0)) }
    }

    static func verdict(_ row: Row, now: Date) -> (String, blocking: Bool, rank: Int) {
        func days(since date: Date) -> Int { Int((now.timeIntervalSince(date) / 86_400).rounded(.down)) }
        var problems: [String] = []
        if let expiry = row.certificateExpiry {
            let left = Int((expiry.timeIntervalSince(now) / 86_400).rounded(.down))
            if expiry <= now {
                problems.append("provider certificate expired \(Self.plural(days(since: expiry), "day")) ago")
            } else if left < Self.certificateWarningDays {
                problems.append("provider certificate expires in \(Self.plural(left, "day"))")
            }
        }
        if row.feedbackBacklog > 0 {
            let waiting =
                "\(Self.grouped(Int64(row.feedbackBacklog))) token\(row.feedbackBacklog == 1 ? "" : "s") waiting"
            if let poll = row.feedbackLastPoll {
                if days(since: poll) >= Self.unpolledDays {
                    problems.append("feedback not polled for \(Self.plural(days(since: poll), "day")): \(waiting)")
                }
            } else {
                problems.append("feedback never polled: \(waiting)")
            }
        }
        let quietSince = [row.lastSeen, row.feedbackLastPoll].compactMap { $0 }.max()
        let quiet = quietSince.map { days(since: $0) >= Self.quietDays } ?? true
        let usage: String
        if quiet {
            if let quietSince {
                usage = "no legacy traffic for \(Self.plural(days(since: quietSince), "day")): ready to retire"
            } else {
                usage = "no legacy traffic recorded: ready to retire"
            }
        } else if let lastSeen = row.lastSeen, days(since: lastSeen) < Self.quietDays {
            usage =
                "still sending: \(Self.grouped(row.notifications)) notification\(row.notifications == 1 ? "" : "s") in \(Self.plural(row.daily.count, "day")), last seen \(Self.ago(now.timeIntervalSince(lastSeen)))"
        } else {
            usage =
                "no notifications for \(Self.quietDays)+ days, but its feedback list is still polled: retire once its cron job is moved"
        }
        let verdict = (problems + [usage]).joined(separator: "; ")
        return (verdict, blocking: !quiet || !problems.isEmpty, rank: !problems.isEmpty ? 0 : (quiet ? 2 : 1))
    }

    static func plural(_ count: Int, _ unit: String) -> String {
        "\(count) \(unit)\(count == 1 ? "" : "s")"
    }

    /// `12,408`.
    public static func grouped(_ value: Int64) -> String {
        let digits = String(value.magnitude)
        var result = ""
        for (index, digit) in digits.enumerated() {
            if index > 0, (digits.count - index) % 3 == 0 { result.append(",") }
            result.append(digit)
        }
        return (value < 0 ? "-" : "") + result
    }

    static func ago(_ seconds: TimeInterval) -> String {
        let seconds = max(0, Int(seconds))
        if seconds < 120 { return "\(seconds) s ago" }
        if seconds < 7200 { return "\(seconds / 60) min ago" }
        if seconds < 2 * 86_400 { return "\(seconds / 3600) h ago" }
        return "\(seconds / 86_400) days ago"
    }
}

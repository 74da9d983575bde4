import BridgeCore
import Foundation
import LegacyProtocol
import Synchronization
import Testing

/// What the migration view counts, and how the report reads it.
@Suite("Usage: the recorder's batches and the migration report")
struct UsageTests {
    /// A settable wall clock.
    final class Clock: Sendable {
        let seconds = Mutex<Int64>(0)
        init(_ seconds: Int64) { self.seconds.withLock { $0 = seconds } }
        var now: Date { Date(timeIntervalSince1970: TimeInterval(self.seconds.withLock { $0 })) }
        func advance(_ by: Int64) { self.seconds.withLock { $0 += by } }
    }

    static let day0: Int64 = 20_000 * 86_400  // 2024-10-04 00:00 UTC

    @Test("Counts by command and outcome go to the day of the collect; a second collect holds only what is new")
    func countsAndDeltas() {
        let clock = Clock(Self.day0 + 3600)
        let recorder = UsageRecorder(now: { clock.now })
        let counters = recorder.counters(tenant: "shop")
        #expect(recorder.counters(tenant: "shop") === counters, "one set of counters per tenant")
        counters.count(command: .itemized, .accepted)
        counters.count(command: .itemized, .accepted, broadcast: true)
        counters.count(command: .enhanced, .rejected(.invalidToken))
        counters.count(command: .simple, .unregistered(timestamp: 1))
        counters.count(command: nil, .rejected(.processingError))
        counters.count(command: .itemized, .gaveUp(.processingError))
        counters.count(command: .itemized, .dropped)
        recorder.connected(
            tenant: "shop",
            tlsVersion: "TLSv1.2",
            address: "127.0.0.1",
            certificate: nil,
            feedback: false
        )

        let day = UsageDay(unixSeconds: Self.day0)
        let batch = recorder.collect()
        func count(_ counter: String) -> Int64? { batch.counts[.init(tenant: "shop", day: day, counter: counter)] }
        #expect(count("command.2") == 4)
        #expect(count("command.1") == 1)
        #expect(count("command.0") == 1)
        #expect(count("accepted") == 1)
        #expect(count("broadcast") == 1)
        #expect(count("unregistered") == 1)
        #expect(count("dropped") == 1)
        #expect(count("status.8") == 1)
        #expect(count("status.1") == 2)
        #expect(count("tls.TLSv1.2") == 1)
        #expect(batch.addresses == [.init(tenant: "shop", day: day, address: "127.0.0.1")])
        #expect(batch.tenants["shop"] == .init(firstSeen: Self.day0 + 3600, lastSeen: Self.day0 + 3600))

        // Nothing new: an empty batch. Then one more, the next day.
        #expect(recorder.collect().isEmpty)
        clock.advance(86_400)
        counters.count(command: .itemized, .accepted)
        let next = recorder.collect()
        #expect(
            next.counts == [
                .init(tenant: "shop", day: UsageDay(number: day.number + 1), counter: "command.2"): 1,
                .init(tenant: "shop", day: UsageDay(number: day.number + 1), counter: "accepted"): 1,
            ]
        )
        #expect(recorder.lastHour(tenant: "shop").last == 1, "this minute")
        #expect(recorder.lastHour(tenant: "shop").count == 60)
    }

    @Test("A batch put back after a failed write is written with the next one, adding up")
    func putBack() {
        let clock = Clock(Self.day0)
        let recorder = UsageRecorder(now: { clock.now })
        let counters = recorder.counters(tenant: "a")
        counters.count(command: .itemized, .accepted)
        recorder.feedbackPolled(tenant: "a", delivered: 3)
        let failed = recorder.collect()
        recorder.putBack(failed)
        counters.count(command: .itemized, .accepted)
        clock.advance(10)
        recorder.feedbackPolled(tenant: "a", delivered: 2)
        let batch = recorder.collect()
        let day = UsageDay(unixSeconds: Self.day0)
        #expect(batch.counts[.init(tenant: "a", day: day, counter: "accepted")] == 2)
        #expect(batch.counts[.init(tenant: "a", day: day, counter: "feedback.polls")] == 2)
        #expect(batch.counts[.init(tenant: "a", day: day, counter: "feedback.tuples")] == 5)
        #expect(batch.tenants["a"]?.lastPoll == Self.day0 + 10)
        #expect(batch.tenants["a"]?.firstSeen == Self.day0)
    }

    static func usage(_ tenant: String, days: [(day: Int, counter: String, value: Int64)]) -> StoredUsage {
        var usage = StoredUsage()
        for entry in days {
            usage.counts[.init(tenant: tenant, day: UsageDay(number: entry.day), counter: entry.counter)] = entry.value
        }
        return usage
    }

    @Test("The report's lines: ready to retire, feedback not polled, certificate ending; the blocking tenants first")
    func verdictsAndOrder() {
        let now = Date(timeIntervalSince1970: TimeInterval(Self.day0 + 12 * 3600))
        let today = UsageDay(now).number
        func ago(days: Int64) -> Int64 { Self.day0 + 12 * 3600 - days * 86_400 }
        var usage = StoredUsage()
        // "retired": last seen 41 days ago, never polled, nothing waiting.
        usage.tenants["retired"] = .init(firstSeen: ago(days: 300), lastSeen: ago(days: 41))
        // "cron": sends daily, its poller stopped 9 days ago with 12,408 tokens waiting.
        usage.tenants["cron"] = .init(firstSeen: ago(days: 100), lastSeen: ago(days: 0), lastPoll: ago(days: 9))
        usage.backlogs["cron"] = .init(tokens: 12_408, oldestRecorded: ago(days: 8))
        usage.counts[.init(tenant: "cron", day: UsageDay(number: today), counter: "command.2")] = 7
        usage.counts[.init(tenant: "cron", day: UsageDay(number: today), counter: "accepted")] = 7
        // "busy": the most traffic, nothing wrong.
        usage.tenants["busy"] = .init(firstSeen: ago(days: 100), lastSeen: ago(days: 0), lastPoll: ago(days: 0))
        usage.counts[.init(tenant: "busy", day: UsageDay(number: today - 1), counter: "command.1")] = 5_000
        usage.counts[.init(tenant: "busy", day: UsageDay(number: today - 1), counter: "accepted")] = 4_990
        usage.counts[.init(tenant: "busy", day: UsageDay(number: today - 1), counter: "status.8")] = 10
        // Outside 30 days:
        usage.counts[.init(tenant: "busy", day: UsageDay(number: today - 40), counter: "accepted")] = 99
        // "ending": its certificate in use ends in 12 days; an older one it replaced ended before.
        usage.tenants["ending"] = .init(firstSeen: ago(days: 100), lastSeen: ago(days: 1))
        usage.certificates["ending"] = [
            .init(
                certificate: .init(fingerprint: "new", subject: "UID=ending", notAfter: ago(days: -12) + 3600),
                firstSeen: ago(days: 20),
                lastSeen: ago(days: 1)
            ),
            .init(
                certificate: .init(fingerprint: "old", subject: "UID=ending", notAfter: ago(days: 5)),
                firstSeen: ago(days: 90),
                lastSeen: ago(days: 20)
            ),
        ]

        let report = MigrationReport(usage: usage, days: 30, now: now, knownTenants: ["never"])
        let verdicts = Dictionary(uniqueKeysWithValues: report.rows.map { ($0.tenant, $0.verdict) })
        #expect(verdicts["retired"] == "no legacy traffic for 41 days: ready to retire")
        #expect(verdicts["never"] == "no legacy traffic recorded: ready to retire")
        #expect(
            verdicts["cron"]?.hasPrefix(
                "feedback not polled for 9 days: 12,408 tokens waiting; still sending: 7 notifications in 30 days"
            ) == true
        )
        #expect(verdicts["ending"]?.hasPrefix("provider certificate expires in 12 days; still sending") == true)
        #expect(verdicts["busy"]?.hasPrefix("still sending: 5,000 notifications in 30 days, last seen") == true)
        #expect(report.rows.map(\.tenant) == ["cron", "ending", "busy", "never", "retired"])
        #expect(report.rows.map(\.blocking) == [true, true, true, false, false])

        let busy = report.rows.first { $0.tenant == "busy" }!
        #expect(busy.notifications == 5_000)
        #expect(busy.byCommand == ["1": 5_000])
        #expect(busy.failedByStatus == ["8": 10])
        #expect(busy.daily.count == 30)
        #expect(busy.daily[28] == 5_000 && busy.daily[29] == 0)
        let ending = report.rows.first { $0.tenant == "ending" }!
        #expect(
            ending.certificateExpiry == Date(timeIntervalSince1970: TimeInterval(ago(days: -12) + 3600)),
            "the replaced certificate no longer counts"
        )
    }

    @Test(
        "A tampered store (counters at INT64_MAX on two days, a negative INT64_MIN status, timestamps at the extremes) makes a report, not a trap"
    )
    func extremeValues() throws {
        let now = Date(timeIntervalSince1970: TimeInterval(Self.day0 + 12 * 3600))
        let today = UsageDay(now).number
        var usage = StoredUsage()
        for day in [today - 1, today] {
            usage.counts[.init(tenant: "evil", day: UsageDay(number: day), counter: "command.2")] = .max
            usage.counts[.init(tenant: "evil", day: UsageDay(number: day), counter: "accepted")] = .max
        }
        usage.counts[.init(tenant: "evil", day: UsageDay(number: today), counter: "status.-9223372036854775808")] = .min
        usage.counts[.init(tenant: "evil", day: UsageDay(number: today), counter: "dropped")] = .max
        usage.tenants["evil"] = .init(firstSeen: .min, lastSeen: .max, lastPoll: .min)
        usage.backlogs["evil"] = .init(tokens: .max, oldestRecorded: .min)
        usage.certificates["evil"] = [
            .init(
                certificate: .init(fingerprint: "a", subject: "UID=evil", notAfter: .max),
                firstSeen: .min,
                lastSeen: .max
            ),
            .init(
                certificate: .init(fingerprint: "b", subject: "UID=evil", notAfter: .min),
                firstSeen: .min,
                lastSeen: .min
            ),
        ]
        let report = MigrationReport(usage: usage, days: 30, now: now)
        let row = try #require(report.rows.first)
        #expect(row.notifications == .max, "saturated, not wrapped")
        #expect(row.accepted == .max)
        #expect(row.daily[28] == .max && row.daily[29] == .max)
        #expect(row.failedByStatus.values.allSatisfy { $0 == 0 }, "a negative count reads as 0")
        #expect(row.lastSeen == Date(timeIntervalSince1970: TimeInterval(UsageTimestamp.latest)))
        #expect(row.firstSeen == Date(timeIntervalSince1970: 0))
        #expect(MigrationReport.certificateInUseExpiry(usage.certificates["evil"]!) != nil)
        #expect(!row.verdict.isEmpty)
        #expect(
            Int64.max.addingSaturated(1) == .max && Int64.min.addingSaturated(-1) == .min
                && Int64(2).addingSaturated(3) == 5
        )
    }

    @Test("Day numbers are UTC calendar days")
    func days() {
        #expect(UsageDay(unixSeconds: 0).description == "1970-01-01")
        #expect(UsageDay(unixSeconds: 86_399).number == 0)
        #expect(UsageDay(unixSeconds: 86_400).number == 1)
        #expect(UsageDay(unixSeconds: Self.day0).description == "2024-10-04")
        #expect(MigrationReport.grouped(12_408) == "12,408")
        #expect(MigrationReport.grouped(999) == "999")
        #expect(MigrationReport.grouped(1_000_000) == "1,000,000")
    }
}

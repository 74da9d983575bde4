import BridgeCore
import BridgeStores
import BridgeTestSupport
import Foundation
import LegacyProtocol
import Logging
import NIOCore
import PostgresNIO
import SQLiteNIO
import Testing

/// No value in a store can trap the process (docs/operations.md#store-values): SQLite keeps a
/// number too large for 64 bits as REAL even in an INTEGER column, and a counter at the top of
/// its range must not be pushed past it by the bridge's own writes.
@Suite("Stored values out of range (SQLite and PostgreSQL)")
struct StoredValueTests {
    static let day = UsageDay(Date())
    static let eventLoop = StoreBehaviourTests.eventLoop

    /// Runs statements on the store's database beside the bridge, as an operator's shell would.
    static func execute(_ statements: [String], in location: String) async throws {
        if location.hasPrefix("sqlite:") {
            let connection = try await SQLiteConnection.open(storage: .file(path: String(location.dropFirst(7))))
            do {
                for statement in statements { _ = try await connection.query(statement) }
            } catch {
                try await connection.close()
                throw error
            }
            try await connection.close()
        } else {
            var logger = Logger(label: "test.postgres")
            logger.logLevel = .error
            let client = PostgresClient(
                configuration: try PostgresBridgeStore.clientConfiguration(url: location),
                backgroundLogger: logger
            )
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await client.run() }
                defer { group.cancelAll() }
                for statement in statements {
                    try await client.query(PostgresQuery(unsafeSQL: statement))
                }
            }
        }
    }

    static func usageBatch(accepted: Int64) -> UsageBatch {
        var batch = UsageBatch()
        batch.add(accepted, to: UsageCounter.accepted, tenant: "com.example.a", day: Self.day)
        batch.add(accepted, to: UsageCounter.command(2), tenant: "com.example.a", day: Self.day)
        batch.saw("com.example.a", .init(firstSeen: 1_000, lastSeen: 2_000, lastPoll: 1_500))
        batch.saw(
            SeenCertificate(fingerprint: "ab", subject: "UID=com.example.a", notAfter: 2_000_000_000),
            tenant: "com.example.a",
            at: 1_000
        )
        return batch
    }

    @Test(
        "SQLite: REAL 1e19 and -1e300 in every integer column: the store opens, usage, backlog and the report read clamped values, feedback drains, a resend lookup answers"
    )
    func realValuesInIntegerColumns() async throws {
        let location = try TestDatabases.sqliteLocation()
        let key = StoreOutageTests.key(3)
        var store = try await StoreKind.sqlite.open(location)
        try await store.recordUsage(Self.usageBatch(accepted: 5))
        try await StoreBehaviourTests.apply([StoreBehaviourTests.unregistered(1)], to: store)
        let corrupt = StoreOutageTests.key(4)
        try await store.remember(
            [ResendRecord(key: key, outcome: .accepted), ResendRecord(key: corrupt, outcome: nil)],
            on: Self.eventLoop
        ).get()
        await store.close()

        try await Self.execute(
            [
                "UPDATE usage_counts SET value = 1e19 WHERE counter = 'accepted'",
                "UPDATE usage_counts SET value = -1e300 WHERE counter = 'command.2'",
                "UPDATE usage_tenants SET first_seen = -1e300, last_seen = 1e19, last_poll = 1e19",
                "UPDATE usage_certificates SET not_after = 1e19, first_seen = -1e300, last_seen = 1e19",
                "UPDATE feedback_entries SET timestamp = 1e19, recorded_at = -1e300",
                "UPDATE resend_records SET outcome_value = -1e300",
                "UPDATE resend_records SET expires_at = 1e19 WHERE outcome IS NULL",
            ],
            in: location
        )

        // The resend-record scan at open, the usage read, the backlog, the drain and a lookup.
        store = try await StoreKind.sqlite.open(location)
        let usage = try await store.usage(from: Self.day, tenant: nil)
        #expect(usage.counts[.init(tenant: "com.example.a", day: Self.day, counter: "accepted")] == .max)
        #expect(usage.counts[.init(tenant: "com.example.a", day: Self.day, counter: "command.2")] == .min)
        #expect(usage.tenants["com.example.a"] == .init(firstSeen: .min, lastSeen: .max, lastPoll: .max))
        #expect(usage.backlogs["com.example.a"] == .init(tokens: 1, oldestRecorded: .min))
        try await store.refreshLiveRecords(tenant: "com.example.a", on: Self.eventLoop).get()
        #expect(try await store.claim(key, on: Self.eventLoop).get() == .answered(.accepted))
        // A record that says it expires in 1e19 ms was not made before this lookup: not taken.
        #expect(try await store.claim(corrupt, on: Self.eventLoop).get() == .new)
        let tuples = try await StoreBehaviourTests.drainAll(store)
        #expect(tuples.map(\.timestamp) == [.max])
        await store.close()

        // `apns-bridge report` reads the same file.
        let read = try await BridgeStoreLocation.withReader(location, logger: Logger(label: "test")) { source in
            try await source.usage(from: Self.day, tenant: nil)
        }
        #expect(read.counts[.init(tenant: "com.example.a", day: Self.day, counter: "accepted")] == .max)
    }

    @Test(
        "SQLite: text and a blob in integer columns are read as missing, each counted, and only the first logged"
    )
    func nonNumbersInIntegerColumns() async throws {
        let location = try TestDatabases.sqliteLocation()
        let path = String(location.dropFirst("sqlite:".count))
        let key = StoreOutageTests.key(5)
        var store = try await StoreKind.sqlite.open(location)
        try await store.recordUsage(Self.usageBatch(accepted: 5))
        try await StoreBehaviourTests.apply([StoreBehaviourTests.unregistered(1)], to: store)
        try await store.remember([ResendRecord(key: key, outcome: .accepted)], on: Self.eventLoop).get()
        await store.close()

        try await Self.execute(
            [
                "UPDATE usage_counts SET value = 'many' WHERE counter = 'accepted'",
                "UPDATE usage_tenants SET last_poll = x'00'",
                "UPDATE feedback_entries SET timestamp = 'yesterday'",
            ],
            in: location
        )

        let log = CapturedLog()
        let opened = try await SQLiteBridgeStore.open(
            path: path,
            logger: log.logger,
            backgroundWork: StoreKind.inTasksOfTheirOwn
        )
        store = opened
        let usage = try await store.usage(from: Self.day, tenant: nil)
        #expect(usage.counts[.init(tenant: "com.example.a", day: Self.day, counter: "accepted")] == nil)
        #expect(usage.counts[.init(tenant: "com.example.a", day: Self.day, counter: "command.2")] == 5)
        #expect(usage.tenants["com.example.a"] == .init(firstSeen: 1_000, lastSeen: 2_000, lastPoll: nil))
        _ = try await store.usage(from: Self.day, tenant: nil)
        let tuples = try await StoreBehaviourTests.drainAll(store)
        #expect(tuples.map(\.timestamp) == [0])
        try await store.refreshLiveRecords(tenant: "com.example.a", on: Self.eventLoop).get()
        #expect(try await store.claim(key, on: Self.eventLoop).get() == .answered(.accepted))
        #expect(opened.health.corruptValuesRead == 5, "two usage reads of two values each, and the drain's timestamp")
        let warnings = log.lines(at: .warning).filter { $0.message.contains("not a number") }
        #expect(warnings.count == 1, "\(warnings.map(\.metadata))")
        #expect(warnings.first?.metadata["column"] == "value")
        await store.close()
    }

    @Test(
        "A usage counter at INT64_MAX stays there when traffic adds to it (SQLite kept it an integer, PostgreSQL wrote it)",
        arguments: StoreKind.available
    )
    func counterAtTheTop(kind: StoreKind) async throws {
        let location = try await kind.makeLocation()
        let store = try await kind.open(location)
        try await store.recordUsage(Self.usageBatch(accepted: 5))
        try await Self.execute(
            ["UPDATE usage_counts SET value = 9223372036854775807 WHERE counter = 'accepted'"],
            in: location
        )
        // What the usage writer flushes next: before, SQLite turned the sum into REAL 9.22e18
        // (which then trapped every reader) and PostgreSQL failed every flush (bigint out of range).
        try await store.recordUsage(Self.usageBatch(accepted: 5))
        try await store.recordUsage(Self.usageBatch(accepted: 5))
        let usage = try await store.usage(from: Self.day, tenant: nil)
        #expect(usage.counts[.init(tenant: "com.example.a", day: Self.day, counter: "accepted")] == .max)
        #expect(usage.counts[.init(tenant: "com.example.a", day: Self.day, counter: "command.2")] == 15)
        await store.close()
        if kind == .sqlite {
            let connection = try await SQLiteConnection.open(storage: .file(path: String(location.dropFirst(7))))
            let type = try await connection.query(
                "SELECT typeof(value) AS t FROM usage_counts WHERE counter = 'accepted'"
            ).first?.column("t")?.string
            try await connection.close()
            #expect(type == "integer")
        }
    }
}

import BridgeCore
import BridgeStores
import BridgeTestSupport
import Foundation
import LegacyProtocol
import Logging
import NIOCore
import Testing

/// The push log's failures in both stores (docs/operations.md#did-it-go): every filter of a
/// lookup, newest first, a failure written twice kept once, a reader beside the bridge, and the
/// usage retention.
@Suite("Push log failures in the store (SQLite and PostgreSQL)")
struct PushFailureStoreTests {
    static func token(_ first: UInt8, count: Int = 32) -> ByteBuffer {
        ByteBuffer(bytes: [first] + (1..<count).map { UInt8($0) })
    }

    static func failure(
        _ sequence: UInt64,
        run: UInt64 = 0xFEED_0000_0000_0001,
        received: UInt64,
        tenant: String = "com.example.a",
        token: ByteBuffer = Self.token(0xAB),
        status: UInt16 = 400,
        outcome: NotificationOutcome = .rejected(.invalidToken),
        channel: String? = nil,
        uniqueID: String? = nil,
        reason: String? = "BadDeviceToken",
        failure: String? = nil,
        keepingToken: Bool = false
    ) -> StoredPushFailure {
        var entry = PushLogEntry(
            forwardedAt: .now(),
            tenant: tenant,
            environment: .sandbox,
            command: .enhanced,
            identifier: NotificationIdentifier(rawValue: UInt32(sequence)),
            token: PushLogEntry.Token(token),
            apnsID: ForwardedNotification.ID(high: 0xFFFF_0000_0000_4000, low: 0x8000_0000_0000_0000 | sequence),
            status: status,
            attempts: 2,
            microseconds: 41_250,
            outcome: outcome,
            resendMatched: status == 0,
            channel: channel,
            uniqueID: uniqueID,
            reason: reason,
            failure: failure,
            tokenBytes: keepingToken ? Array(token.readableBytesView) : nil
        )
        entry.sequence = sequence
        return StoredPushFailure(entry, run: run, receivedMilliseconds: received)
    }

    @Test(
        "Each filter finds its failures, newest first; a failure written twice is kept once; a reader sees the same",
        arguments: StoreKind.available
    )
    func filters(kind: StoreKind) async throws {
        let location = try await kind.makeLocation()
        let store = try await kind.open(location)
        let now = UInt64(Date().timeIntervalSince1970 * 1000)
        let failures = [
            Self.failure(1, received: now - 3_000),
            Self.failure(
                2,
                received: now - 2_000,
                tenant: "com.example.b",
                token: Self.token(0xCD),
                status: 410,
                outcome: .unregistered(timestamp: 1_767_225_600),
                channel: "scores",
                uniqueID: "5b2f6a1c-0d3e-4f7a-9b8c-1d2e3f4a5b6c",
                reason: "Unregistered",
                keepingToken: true
            ),
            Self.failure(
                3,
                received: now - 1_000,
                token: Self.token(0xAB, count: 2),
                status: 0,
                outcome: .gaveUp(.processingError),
                reason: nil,
                failure: "retryBudgetExhausted"
            ),
            // Another process's log, with a number the first also used.
            Self.failure(1, run: 0x8000_0000_0000_0002, received: now, status: 429, outcome: .dropped),
        ]
        try await store.recordPushFailures(failures)
        try await store.recordPushFailures(Array(failures.prefix(2)))

        func found(_ change: (inout PushLogQuery) -> Void) async throws -> [UInt64] {
            var query = PushLogQuery()
            change(&query)
            return try await store.pushFailures(matching: query).map { $0.entry.sequence * 10 + ($0.run & 0xF) }
        }
        let all = try await store.pushFailures(matching: PushLogQuery())
        #expect(all.map(\.entry.sequence) == [1, 3, 2, 1], "newest first, each once")
        #expect(
            Set(all) == Set(failures),
            "every field as written: each outcome, absent and present texts, a whole token"
        )
        #expect(try await found { $0.limit = 2 } == [12, 31])
        #expect(try await found { $0.tenant = "com.example.b" } == [21])
        #expect(try await found { $0.tokenHash = PushLog.tokenHash(Self.token(0xCD)) } == [21])
        #expect(try await found { $0.tokenPrefix = [0xAB] } == [12, 31, 11])
        #expect(try await found { $0.tokenPrefix = [0xAB, 0x01, 0x02] } == [12, 11], "the 2-byte token is too short")
        #expect(try await found { $0.tokenPrefix = [0xAB, 0x01, 0x02, 0x03] } == [12, 11])
        #expect(try await found { $0.tokenPrefix = [0xAB, 0x02] } == [])
        #expect(try await found { $0.identifier = NotificationIdentifier(rawValue: 2) } == [21])
        #expect(try await found { $0.apnsID = failures[2].entry.apnsID } == [31])
        #expect(try await found { $0.status = 0 } == [31])
        #expect(try await found { $0.status = 410 } == [21])
        #expect(try await found { $0.since = now - 1_500 } == [12, 31])
        #expect(
            try await found {
                $0.tenant = "com.example.a"
                $0.status = 400
            } == [11]
        )

        // A reader, as `apns-bridge log --store` opens the store beside a running bridge.
        let read = try await BridgeStoreLocation.withReader(location, logger: Logger(label: "test")) { reader in
            try await reader.pushFailures(matching: PushLogQuery())
        }
        #expect(read == all)
        await store.close()
    }

    @Test("Failures older than the usage retention are removed by the sweep", arguments: StoreKind.available)
    func retention(kind: StoreKind) async throws {
        let now = Date()
        var configuration = BridgeStoreConfiguration()
        configuration.now = { now }
        configuration.usageRetention = .seconds(10 * 86_400)
        let store = try await kind.open(try await kind.makeLocation(), configuration: configuration)
        let nowMilliseconds = UInt64(now.timeIntervalSince1970 * 1000)
        try await store.recordPushFailures([
            Self.failure(1, received: nowMilliseconds - 11 * 86_400_000),
            Self.failure(2, received: nowMilliseconds - 9 * 86_400_000),
        ])
        let sweep = try await store.removeExpired()
        #expect(sweep.pushFailures == 1)
        #expect(try await store.pushFailures(matching: PushLogQuery()).map(\.entry.sequence) == [2])
        await store.close()
    }

    @Test(
        "A reader of a store from before the push log's table says so, and still reads the usage",
        arguments: StoreKind.available
    )
    func storeBeforeTheTable(kind: StoreKind) async throws {
        let location = try await kind.makeLocation()
        await (try await kind.open(location)).close()
        // Back to the schema before, as a bridge of the release before left it.
        try await StoredValueTests.execute(
            kind == .sqlite
                ? ["DROP TABLE push_failures", "PRAGMA user_version = 3"]
                : ["DROP TABLE push_failures", "DELETE FROM apns_bridge_schema WHERE version >= 5"],
            in: location
        )
        let logger = Logger(label: "test")
        do {
            _ = try await BridgeStoreLocation.withReader(location, logger: logger) { reader in
                try await reader.pushFailures(matching: PushLogQuery())
            }
            Issue.record("the reader read a table that is not there")
        } catch {
            let found = kind == .sqlite ? 3 : 4
            #expect("\(error)".contains("keeps no push log failures yet (schema version \(found))"), "\(error)")
        }
        let usage = try await BridgeStoreLocation.withReader(location, logger: logger) { reader in
            try await reader.usage(from: UsageDay(Date()), tenant: nil)
        }
        #expect(usage.tenantNames.isEmpty)
    }
}

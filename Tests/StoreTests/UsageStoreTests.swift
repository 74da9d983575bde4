import BridgeCore
import BridgeStores
import BridgeTestSupport
import Foundation
import Logging
import Testing

/// Usage lasts in both stores; batches of several instances (or of one bridge before
/// and after a restart) add up; a reader of a running bridge's store sees the same; retention
/// removes old days.
@Suite("Usage in the store (SQLite and PostgreSQL)")
struct UsageStoreTests {
    static let day = UsageDay(Date())

    static func batch(
        tenant: String,
        accepted: Int64,
        address: String,
        seenAt: Int64,
        poll: Int64? = nil,
        certificate: SeenCertificate? = nil
    ) -> UsageBatch {
        var batch = UsageBatch()
        batch.add(accepted, to: UsageCounter.command(2), tenant: tenant, day: Self.day)
        batch.add(accepted, to: UsageCounter.accepted, tenant: tenant, day: Self.day)
        batch.add(1, to: UsageCounter.tls("TLSv1.2"), tenant: tenant, day: Self.day)
        batch.addresses.insert(.init(tenant: tenant, day: Self.day, address: address))
        batch.saw(tenant, .init(firstSeen: seenAt, lastSeen: seenAt, lastPoll: poll))
        if let certificate {
            batch.saw(certificate, tenant: tenant, at: seenAt)
        }
        return batch
    }

    @Test(
        "Two writers' batches add up; times keep the earliest first and the latest last sighting; a reader sees the same",
        arguments: StoreKind.available
    )
    func batchesAddUp(kind: StoreKind) async throws {
        let location = try await kind.makeLocation()
        let certificate = SeenCertificate(fingerprint: "ab12", subject: "UID=com.example.a", notAfter: 2_000_000_000)
        // Two instances on one database (PostgreSQL), or one bridge before and after a restart
        // (SQLite: one process per file).
        let first = try await kind.open(location)
        try await first.recordUsage(
            Self.batch(
                tenant: "com.example.a",
                accepted: 5,
                address: "127.0.0.1",
                seenAt: 1_000,
                certificate: certificate
            )
        )
        let second: any BridgeStore
        if kind == .sqlite {
            await first.close()
            second = try await kind.open(location)
        } else {
            second = try await kind.open(location)
        }
        try await second.recordUsage(
            Self.batch(
                tenant: "com.example.a",
                accepted: 7,
                address: "::1",
                seenAt: 3_000,
                poll: 2_500,
                certificate: certificate
            )
        )
        try await second.recordUsage(
            Self.batch(tenant: "com.example.a", accepted: 1, address: "127.0.0.1", seenAt: 2_000)
        )
        try await second.recordUsage(
            Self.batch(tenant: "com.example.b", accepted: 2, address: "127.0.0.1", seenAt: 2_000)
        )
        if kind == .postgres {
            try await first.recordUsage(
                Self.batch(tenant: "com.example.a", accepted: 10, address: "127.0.0.1", seenAt: 500)
            )
        }
        let expectedAccepted: Int64 = kind == .postgres ? 23 : 13

        let usage = try await second.usage(from: Self.day, tenant: nil)
        #expect(usage.counts[.init(tenant: "com.example.a", day: Self.day, counter: "accepted")] == expectedAccepted)
        #expect(usage.counts[.init(tenant: "com.example.a", day: Self.day, counter: "command.2")] == expectedAccepted)
        #expect(usage.counts[.init(tenant: "com.example.b", day: Self.day, counter: "accepted")] == 2)
        #expect(usage.distinctAddresses == ["com.example.a": 2, "com.example.b": 1])
        #expect(
            usage.tenants["com.example.a"]
                == .init(firstSeen: kind == .postgres ? 500 : 1_000, lastSeen: 3_000, lastPoll: 2_500)
        )
        let sightings = try #require(usage.certificates["com.example.a"])
        #expect(sightings == [.init(certificate: certificate, firstSeen: 1_000, lastSeen: 3_000)])

        let one = try await second.usage(from: Self.day, tenant: "com.example.b")
        #expect(one.tenantNames == ["com.example.b"])

        // A reader, as `apns-bridge report` opens the store beside a running bridge.
        let read = try await BridgeStoreLocation.withReader(location, logger: Logger(label: "test")) { source in
            try await source.usage(from: Self.day, tenant: nil)
        }
        #expect(read == usage)

        if kind == .postgres { await first.close() }
        await second.close()
    }

    @Test("The backlog per tenant: tokens waiting and when the oldest was recorded", arguments: StoreKind.available)
    func backlog(kind: StoreKind) async throws {
        var configuration = BridgeStoreConfiguration()
        configuration.now = { Date(timeIntervalSince1970: 1_700_000_000) }
        let store = try await kind.open(try await kind.makeLocation(), configuration: configuration)
        try await StoreBehaviourTests.apply(
            [StoreBehaviourTests.unregistered(1), StoreBehaviourTests.unregistered(2)],
            to: store
        )
        try await StoreBehaviourTests.apply([StoreBehaviourTests.unregistered(3, tenant: "com.example.b")], to: store)
        let usage = try await store.usage(from: Self.day, tenant: nil)
        #expect(usage.backlogs["com.example.a"] == .init(tokens: 2, oldestRecorded: 1_700_000_000))
        #expect(usage.backlogs["com.example.b"] == .init(tokens: 1, oldestRecorded: 1_700_000_000))
        await store.close()
    }

    @Test(
        "Retention removes the days before it, and tenants and certificates not seen since",
        arguments: StoreKind.available
    )
    func retention(kind: StoreKind) async throws {
        let now = Date()
        var configuration = BridgeStoreConfiguration()
        configuration.usageRetention = .seconds(10 * 86_400)
        let store = try await kind.open(try await kind.makeLocation(), configuration: configuration)
        let old = UsageDay(number: Self.day.number - 11)
        var batch = UsageBatch()
        batch.add(4, to: UsageCounter.accepted, tenant: "gone", day: old)
        batch.addresses.insert(.init(tenant: "gone", day: old, address: "127.0.0.1"))
        let oldSeconds = Int64(old.start.timeIntervalSince1970)
        batch.saw("gone", .init(firstSeen: oldSeconds, lastSeen: oldSeconds))
        batch.saw(SeenCertificate(fingerprint: "f", subject: "UID=gone", notAfter: 1), tenant: "gone", at: oldSeconds)
        batch.add(3, to: UsageCounter.accepted, tenant: "kept", day: Self.day)
        batch.saw("kept", .init(firstSeen: oldSeconds, lastSeen: Int64(now.timeIntervalSince1970)))
        try await store.recordUsage(batch)

        let sweep = try await store.removeExpired()
        #expect(sweep.usageRows == 4)
        let usage = try await store.usage(from: UsageDay(number: 0), tenant: nil)
        #expect(usage.tenantNames == ["kept"])
        #expect(usage.counts == [.init(tenant: "kept", day: Self.day, counter: "accepted"): 3])
        await store.close()
    }
}

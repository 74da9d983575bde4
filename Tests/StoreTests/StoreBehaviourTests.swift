import BridgeCore
import BridgeStores
import BridgeTestSupport
import Foundation
import LegacyProtocol
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import Synchronization
import Testing

/// One behavioural suite, run against both stores: what the gateway records, what the
/// feedback listener serves, and the resend records of docs/protocol.md#resend-records.
@Suite("Store behaviour (SQLite and PostgreSQL)")
struct StoreBehaviourTests {
    static let eventLoop = MultiThreadedEventLoopGroup.singleton.any()

    static func token(_ n: Int, length: Int = 32) -> ByteBuffer {
        var bytes = ByteBuffer()
        bytes.writeInteger(UInt32(n))
        bytes.writeRepeatingByte(0xA5, count: length - 4)
        return bytes
    }

    /// A resend key of tenant `com.example.a`; `digest` keeps one test's keys apart from another's.
    static func resendKey(_ number: Int, digest: UInt64) -> ResendRecordKey {
        ResendRecordKey(
            tenant: "com.example.a",
            deviceToken: Self.token(number),
            payloadDigest: .init(bytes: (digest, digest, digest, UInt64(number))),
            priority: 10
        )
    }

    /// An id whose 128 bits all matter: a store that kept half of it would not give it back.
    static func notificationID(_ n: Int) -> ForwardedNotification.ID {
        ForwardedNotification.ID(high: 0x0123_4567_89AB_4DEF ^ UInt64(n) << 32, low: 0x8000_0000_0000_0000 | UInt64(n))
    }

    static func unregistered(
        _ n: Int,
        tenant: String = "com.example.a",
        environment: APNsEnvironment = .production,
        at timestamp: UInt32 = 1000,
        length: Int = 32
    ) -> FeedbackChange {
        .unregistered(
            FeedbackEntry(
                tenant: tenant,
                environment: environment,
                deviceToken: token(n, length: length),
                timestamp: timestamp
            )
        )
    }

    static func apply(_ changes: [FeedbackChange], to store: any BridgeStore) async throws {
        try await EventLoopFuture.andAllSucceed(changes.map { store.apply($0, on: eventLoop) }, on: eventLoop).get()
    }

    /// Drains everything (like a poller that reads to the end) and returns the tuples.
    static func drainAll(
        _ store: any BridgeStore,
        tenant: String = "com.example.a",
        environment: APNsEnvironment = .production,
        options: FeedbackDrainOptions = .init()
    ) async throws -> [FeedbackTuple] {
        let received = Mutex<[FeedbackTuple]>([])
        let finished = Mutex(0)
        let result = try await store.drain(
            tenant: tenant,
            environment: environment,
            options: options,
            pollerConnected: { true },
            deliver: { tuples in received.withLock { $0 += tuples } },
            finish: { finished.withLock { $0 += 1 } }
        )
        #expect(result.completed)
        #expect(finished.withLock { $0 } == 1, "finish is called once, after the last batch")
        let tuples = received.withLock { $0 }
        #expect(result.delivered == tuples.count)
        return tuples
    }

    static func tokenNumbers(_ tuples: [FeedbackTuple]) -> [Int] {
        tuples.map { Int($0.deviceToken.getInteger(at: $0.deviceToken.readerIndex, as: UInt32.self)!) }
    }

    @Test(
        "PostgreSQL is configured for these tests",
        .enabled(if: TestDatabases.postgresURL != nil, "APNS_BRIDGE_TEST_POSTGRES_URL is not set; run scripts/test")
    )
    func postgresIsConfigured() async throws {
        let store = try await StoreKind.postgres.open(try await StoreKind.postgres.makeLocation())
        #expect(try await store.pendingCount() == 0)
        await store.close()
    }

    @Test(
        "One entry per token, keeping the latest timestamp; a 200 removes it; a later 410 records it again",
        arguments: StoreKind.available
    )
    func recording(kind: StoreKind) async throws {
        let store = try await kind.open(try await kind.makeLocation())
        try await Self.apply([Self.unregistered(1, at: 100), Self.unregistered(2, at: 100)], to: store)
        try await Self.apply([Self.unregistered(1, at: 300)], to: store)
        try await Self.apply([Self.unregistered(1, at: 200)], to: store)  // older: ignored
        var pending = try await store.pendingEntries(tenant: "com.example.a", environment: .production, limit: 10)
        #expect(pending.map(\.timestamp).sorted() == [100, 300])
        #expect(try await store.pendingCount() == 2)

        try await Self.apply(
            [.registered(FeedbackKey(tenant: "com.example.a", environment: .production, deviceToken: Self.token(2)))],
            to: store
        )
        pending = try await store.pendingEntries(tenant: "com.example.a", environment: .production, limit: 10)
        #expect(pending.map(\.deviceToken) == [Self.token(1)])

        try await Self.apply([Self.unregistered(2, at: 400)], to: store)
        #expect(try await store.pendingCount() == 2)
        await store.close()
    }

    @Test(
        "A 200 reaches the database only for a token that may be on a list; the filter is loaded at open and rebuilt by the sweep",
        arguments: StoreKind.available
    )
    func feedbackListFilter(kind: StoreKind) async throws {
        let location = try await kind.makeLocation()
        var store = try await kind.open(location)
        try await Self.apply(
            [Self.unregistered(1), Self.unregistered(2), Self.unregistered(3, environment: .sandbox)],
            to: store
        )
        await store.close()
        store = try await kind.open(location)
        let production = FeedbackListFilter.List(tenant: "com.example.a", environment: .production)
        let filter = store.feedbackListFilter
        #expect(filter.mayContain(Self.token(1), on: production), "loaded from the database at open")
        #expect(filter.mayContain(Self.token(2), on: production))
        #expect(!filter.mayContain(Self.token(3), on: production), "token 3 is on the sandbox list only")
        #expect(!filter.mayContain(Self.token(4), on: production))
        // What the gateway asks before it hands a 200 to the store.
        let recorder: any FeedbackRecorder = store
        #expect(
            recorder.mayBeOnList(
                FeedbackKey(tenant: "com.example.a", environment: .production, deviceToken: Self.token(1))
            )
        )
        #expect(
            !recorder.mayBeOnList(
                FeedbackKey(tenant: "com.example.a", environment: .production, deviceToken: Self.token(4))
            )
        )

        func registered(_ n: Int) -> FeedbackChange {
            .registered(FeedbackKey(tenant: "com.example.a", environment: .production, deviceToken: Self.token(n)))
        }
        try await Self.apply([registered(1), registered(4)], to: store)
        #expect(
            Self.tokenNumbers(try await Self.drainAll(store)) == [2],
            "a 200 still removes a token that is on the list"
        )
        #expect(filter.mayContain(Self.token(2), on: production), "served, but the filter has not been rebuilt yet")
        _ = try await store.removeExpired()
        #expect(!filter.mayContain(Self.token(2), on: production), "the sweep rebuilt the filter from the database")
        #expect(filter.mayContain(Self.token(3), on: .init(tenant: "com.example.a", environment: .sandbox)))

        // Proof that a 200 for a token on no list never reaches the database: after close, the
        // database refuses every write, yet that 200 still succeeds.
        try await Self.apply([Self.unregistered(5)], to: store)
        await store.close()
        try await store.apply(registered(6), on: Self.eventLoop).get()
        await #expect(throws: (any Error).self) { try await store.apply(registered(5), on: Self.eventLoop).get() }
    }

    @Test(
        "PostgreSQL: a 410 written by one instance reaches the other's filter, so a 200 there removes it",
        .enabled(if: TestDatabases.postgresURL != nil, "APNS_BRIDGE_TEST_POSTGRES_URL is not set; run scripts/test")
    )
    func feedbackListFilterAcrossInstances() async throws {
        let location = try await StoreKind.postgres.makeLocation()
        let first = try await StoreKind.postgres.open(location)
        let second = try await StoreKind.postgres.open(location)
        let list = FeedbackListFilter.List(tenant: "com.example.a", environment: .production)
        #expect(!second.feedbackListFilter.mayContain(Self.token(9), on: list))
        try await Self.apply([Self.unregistered(9)], to: first)
        // PostgreSQL delivers the notification after the commit, on the listening connection.
        try await eventually("the other instance's notification", timeout: .seconds(60)) {
            second.feedbackListFilter.mayContain(Self.token(9), on: list)
        }
        #expect(second.feedbackListFilter.mayContain(Self.token(9), on: list))
        try await Self.apply(
            [.registered(FeedbackKey(tenant: "com.example.a", environment: .production, deviceToken: Self.token(9)))],
            to: second
        )
        #expect(try await first.pendingCount() == 0)
        await first.close()
        await second.close()
    }

    @Test("A 410 and a 200 for the same token in one batch: the later wins", arguments: StoreKind.available)
    func sameBatchOrder(kind: StoreKind) async throws {
        let store = try await kind.open(try await kind.makeLocation())
        let key = FeedbackKey(tenant: "com.example.a", environment: .production, deviceToken: Self.token(7))
        // Submitted without waiting, so they share a commit.
        let first = store.apply(Self.unregistered(7), on: Self.eventLoop)
        let second = store.apply(.registered(key), on: Self.eventLoop)
        let third = store.apply(Self.unregistered(8), on: Self.eventLoop)
        let fourth = store.apply(
            .registered(FeedbackKey(tenant: "com.example.a", environment: .production, deviceToken: Self.token(8))),
            on: Self.eventLoop
        )
        let fifth = store.apply(Self.unregistered(8, at: 2000), on: Self.eventLoop)
        for future in [first, second, third, fourth, fifth] { try await future.get() }
        let pending = try await store.pendingEntries(tenant: "com.example.a", environment: .production, limit: 10)
        #expect(
            Self.tokenNumbers(pending.map { FeedbackTuple(timestamp: $0.timestamp, deviceToken: $0.deviceToken) }) == [
                8
            ]
        )
        #expect(pending.first?.timestamp == 2000)
        await store.close()
    }

    @Test(
        "A drain serves every pending entry in order, deletes them, and an empty list finishes at once",
        arguments: StoreKind.available
    )
    func drainEverything(kind: StoreKind) async throws {
        let store = try await kind.open(try await kind.makeLocation())
        try await Self.apply((0..<2_500).map { Self.unregistered($0, at: UInt32(1_700_000_000 + $0)) }, to: store)
        let tuples = try await Self.drainAll(store, options: .init(batchSize: 1000))
        #expect(tuples.count == 2_500)
        #expect(Set(Self.tokenNumbers(tuples)) == Set(0..<2_500))
        #expect(
            tuples.allSatisfy {
                $0.timestamp == 1_700_000_000 + UInt32($0.deviceToken.getInteger(at: 0, as: UInt32.self)!)
            }
        )
        #expect(try await store.pendingCount() == 0)
        #expect(try await Self.drainAll(store).isEmpty)
        await store.close()
    }

    @Test(
        "A poller that goes away midway: what it took is deleted, the rest is served next time",
        arguments: StoreKind.available
    )
    func interruptedDrain(kind: StoreKind) async throws {
        let store = try await kind.open(try await kind.makeLocation())
        try await Self.apply((0..<50).map { Self.unregistered($0) }, to: store)
        struct PollerGone: Error {}
        let batches = Mutex(0)
        let finished = Mutex(false)
        let result = try await store.drain(
            tenant: "com.example.a",
            environment: .production,
            options: .init(batchSize: 10),
            pollerConnected: { true },
            deliver: { _ in
                let n = batches.withLock {
                    $0 += 1
                    return $0
                }
                if n == 3 { throw PollerGone() }
            },
            finish: { finished.withLock { $0 = true } }
        )
        #expect(result == FeedbackDrainResult(delivered: 20, completed: false))
        #expect(!finished.withLock { $0 })
        #expect(try await store.pendingCount() == 30)
        let rest = try await Self.drainAll(store)
        #expect(rest.count == 30)
        await store.close()
    }

    @Test("Concurrent pollers never receive the same entry", arguments: StoreKind.available)
    func concurrentDrains(kind: StoreKind) async throws {
        let store = try await kind.open(try await kind.makeLocation())
        try await Self.apply((0..<3_000).map { Self.unregistered($0) }, to: store)
        let all = try await withThrowingTaskGroup(of: [Int].self) { group in
            for _ in 0..<6 {
                group.addTask {
                    // Small batches, so that the drains interleave.
                    Self.tokenNumbers(try await Self.drainAll(store, options: .init(batchSize: 25)))
                }
            }
            var all: [Int] = []
            for try await part in group { all += part }
            return all
        }
        #expect(all.count == 3_000, "delivered \(all.count), duplicates \(all.count - Set(all).count)")
        #expect(Set(all) == Set(0..<3_000))
        await store.close()
    }

    @Test("A tenant never sees another tenant's tokens, nor another environment's", arguments: StoreKind.available)
    func isolation(kind: StoreKind) async throws {
        let store = try await kind.open(try await kind.makeLocation())
        try await Self.apply(
            [
                Self.unregistered(1, tenant: "com.example.a"),
                Self.unregistered(2, tenant: "com.example.b"),
                Self.unregistered(3, tenant: "com.example.a", environment: .sandbox),
                Self.unregistered(4, tenant: "com.example.a"),
            ],
            to: store
        )
        #expect(Self.tokenNumbers(try await Self.drainAll(store, tenant: "com.example.b")) == [2])
        #expect(
            Self.tokenNumbers(try await Self.drainAll(store, tenant: "com.example.a", environment: .sandbox)) == [3]
        )
        #expect(Set(Self.tokenNumbers(try await Self.drainAll(store, tenant: "com.example.a"))) == [1, 4])
        #expect(try await Self.drainAll(store, tenant: "com.example.c").isEmpty)
        await store.close()
    }

    @Test("The 38-byte option leaves tokens that are not 32 bytes out (and pending)", arguments: StoreKind.available)
    func only32ByteTokens(kind: StoreKind) async throws {
        let store = try await kind.open(try await kind.makeLocation())
        try await Self.apply(
            [Self.unregistered(1), Self.unregistered(2, length: 64), Self.unregistered(3, length: 100)],
            to: store
        )
        let tuples = try await Self.drainAll(store, options: .init(only32ByteTokens: true))
        #expect(Self.tokenNumbers(tuples) == [1])
        #expect(try await store.pendingCount() == 2)
        let rest = try await Self.drainAll(store)
        #expect(rest.map(\.deviceToken.readableBytes).sorted() == [64, 100])
        await store.close()
    }

    @Test("A newer 410 for a token being served survives the drain", arguments: StoreKind.available)
    func newerEntryDuringDrain(kind: StoreKind) async throws {
        let store = try await kind.open(try await kind.makeLocation())
        try await Self.apply([Self.unregistered(1, at: 100), Self.unregistered(2, at: 100)], to: store)
        let result = try await store.drain(
            tenant: "com.example.a",
            environment: .production,
            options: .init(),
            pollerConnected: { true },
            deliver: { _ in
                // While the poller reads: token 1 is unregistered again, later.
                try await Self.apply([Self.unregistered(1, at: 500)], to: store)
            },
            finish: {}
        )
        #expect(result.delivered == 2)
        let pending = try await store.pendingEntries(tenant: "com.example.a", environment: .production, limit: 10)
        #expect(pending.map(\.timestamp) == [500])
        await store.close()
    }

    @Test("Entries survive closing and reopening the store", arguments: StoreKind.available)
    func durableAcrossReopen(kind: StoreKind) async throws {
        let location = try await kind.makeLocation()
        var store = try await kind.open(location)
        try await Self.apply((0..<10).map { Self.unregistered($0) }, to: store)
        let key = ResendRecordKey(
            tenant: "com.example.a",
            deviceToken: Self.token(7),
            payloadDigest: .init(bytes: (1, 2, 3, 4)),
            priority: 10
        )
        try await store.remember([ResendRecord(key: key, outcome: .accepted)], on: Self.eventLoop).get()
        await store.close()
        store = try await kind.open(location)
        #expect(try await store.pendingCount() == 10)
        // What a provider connection of the tenant does when it starts.
        try await store.refreshLiveRecords(tenant: "com.example.a", on: Self.eventLoop).get()
        #expect(store.mayHoldLiveRecords(tenant: "com.example.a"), "the reopened store knows the record is live")
        #expect(!store.mayHoldLiveRecords(tenant: "com.example.b"))
        #expect(try await store.claim(key, on: Self.eventLoop).get() == .answered(.accepted))
        await store.close()
    }

    @Test(
        "Retention removes old entries; a claim older than the lease (its drain died) is released",
        arguments: StoreKind.available
    )
    func retentionAndLease(kind: StoreKind) async throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_800_000_000))
        var configuration = BridgeStoreConfiguration()
        configuration.now = clock.function
        configuration.feedbackRetention = .seconds(3600)
        configuration.claimLease = .seconds(600)
        let store = try await kind.open(try await kind.makeLocation(), configuration: configuration)
        try await Self.apply((0..<5).map { Self.unregistered($0) }, to: store)
        clock.advance(by: 1800)
        try await Self.apply((5..<8).map { Self.unregistered($0) }, to: store)
        func pending() async throws -> Int {
            let entries = try await store.pendingEntries(tenant: "com.example.a", environment: .production, limit: 100)
            return entries.count
        }

        // A drain that hangs in its first batch, like one whose process froze.
        struct Abandoned: Error {}
        let release = Mutex(false)
        let stuck = Task {
            try await store.drain(
                tenant: "com.example.a",
                environment: .production,
                options: .init(batchSize: 3),
                pollerConnected: { true }
            ) { _ in
                while !release.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
                throw Abandoned()
            } finish: {
            }
        }
        try await eventually("the first batch's claim") { try await pending() != 8 }
        #expect(try await pending() == 5, "the first batch of 3 is claimed")
        #expect(try await store.removeExpired().releasedClaims == 0, "within the lease")
        clock.advance(by: 601)
        #expect(try await store.removeExpired().releasedClaims == 3)
        #expect(try await pending() == 8)
        release.withLock { $0 = true }
        #expect(try await stuck.value == FeedbackDrainResult(delivered: 0, completed: false))

        clock.advance(by: 1400)  // entries 0..<5 are now 3801 s old, 5..<8 2001 s
        #expect(try await store.removeExpired().feedbackEntries == 5)
        #expect(Set(Self.tokenNumbers(try await Self.drainAll(store))) == [5, 6, 7])
        await store.close()
    }

    @Test(
        "Resend records: each is used once; a pending outcome is waited for; one the bridge decided is not kept; expired ones are gone",
        arguments: StoreKind.available
    )
    func resendRecords(kind: StoreKind) async throws {
        let clock = TestClock(Date(timeIntervalSince1970: 1_800_000_000))
        var configuration = BridgeStoreConfiguration()
        configuration.now = clock.function
        configuration.resendRecordWindow = .seconds(120)
        let store = try await kind.open(try await kind.makeLocation(), configuration: configuration)
        func key(_ number: UInt32, tenant: String = "com.example.a", priority: UInt8 = 10) -> ResendRecordKey {
            ResendRecordKey(
                tenant: tenant,
                deviceToken: Self.token(Int(number)),
                payloadDigest: .init(bytes: (9, 9, 9, UInt64(number))),
                priority: priority
            )
        }
        #expect(!store.mayHoldLiveRecords(tenant: "com.example.a"), "no record yet: notifications skip the store")
        #expect(try await store.claim(key(1), on: Self.eventLoop).get() == .new)
        try await store.remember(
            [
                ResendRecord(key: key(1), outcome: .accepted),
                ResendRecord(key: key(2), outcome: .rejected(.invalidToken)),
                ResendRecord(key: key(3), outcome: nil),
                ResendRecord(key: key(4), outcome: .unregistered(timestamp: 77)),
                ResendRecord(key: key(5), outcome: .dropped, notificationID: Self.notificationID(5)),
            ],
            on: Self.eventLoop
        ).get()
        // A resend comes after the error-response, so after its records: a claim takes only
        // records made before it began (the clock stands still otherwise).
        clock.advance(by: 1)

        #expect(store.mayHoldLiveRecords(tenant: "com.example.a"))
        #expect(!store.mayHoldLiveRecords(tenant: "com.example.b"), "horizons are per tenant")
        #expect(
            try await store.claim(key(1, priority: 5), on: Self.eventLoop).get() == .new,
            "another priority is another notification"
        )
        #expect(try await store.claim(key(1), on: Self.eventLoop).get() == .answered(.accepted))
        #expect(try await store.claim(key(1), on: Self.eventLoop).get() == .new, "a record is used once")
        #expect(
            try await store.claim(key(1, tenant: "com.example.b"), on: Self.eventLoop).get() == .new,
            "another tenant's identical frame is new"
        )
        #expect(try await store.claim(key(2), on: Self.eventLoop).get() == .answered(.rejected(.invalidToken)))
        #expect(try await store.claim(key(4), on: Self.eventLoop).get() == .answered(.unregistered(timestamp: 77)))
        #expect(
            try await store.claim(key(5), on: Self.eventLoop).get()
                == .outcomeUnknown(firstSentAs: Self.notificationID(5)),
            "forwarded again under the id it first went with"
        )

        // Pending: the claim waits until the first send's outcome is stored.
        let claim = store.claim(key(3), on: Self.eventLoop)
        try await Task.sleep(for: .milliseconds(100))
        try await store.resolve(key(3), outcome: .rejected(.invalidTopicSize), on: Self.eventLoop).get()
        #expect(try await claim.get() == .answered(.rejected(.invalidTopicSize)))

        // An outcome the bridge decided (its retry budget ran out) leaves the record unknown:
        // the claim waiting for it is told to forward again, as is a later claim.
        try await store.remember(
            [
                ResendRecord(key: key(8), outcome: nil, notificationID: Self.notificationID(81)),
                ResendRecord(key: key(8), outcome: nil, notificationID: Self.notificationID(82)),
            ],
            on: Self.eventLoop
        ).get()
        clock.advance(by: 1)
        let waiting = store.claim(key(8), on: Self.eventLoop)
        try await store.resolve(key(8), outcome: .gaveUp(.processingError), on: Self.eventLoop).get()
        #expect(try await waiting.get() == .outcomeUnknown(firstSentAs: Self.notificationID(81)))
        try await store.resolve(key(8), outcome: .gaveUp(.processingError), on: Self.eventLoop).get()
        #expect(
            try await store.claim(key(8), on: Self.eventLoop).get()
                == .outcomeUnknown(firstSentAs: Self.notificationID(82))
        )

        // Two identical notifications forwarded after an error: two records, each used once.
        try await store.remember(
            [
                ResendRecord(key: key(7), outcome: .accepted),
                ResendRecord(key: key(7), outcome: .unregistered(timestamp: 5)),
            ],
            on: Self.eventLoop
        ).get()
        clock.advance(by: 1)
        let twice = [
            try await store.claim(key(7), on: Self.eventLoop).get(),
            try await store.claim(key(7), on: Self.eventLoop).get(),
        ]
        #expect(Set(twice) == [.answered(.accepted), .answered(.unregistered(timestamp: 5))])
        #expect(try await store.claim(key(7), on: Self.eventLoop).get() == .new)

        // Expiry.
        try await store.remember([ResendRecord(key: key(6), outcome: .accepted)], on: Self.eventLoop).get()
        clock.advance(by: 121)
        #expect(try await store.claim(key(6), on: Self.eventLoop).get() == .new)
        #expect(
            !store.mayHoldLiveRecords(tenant: "com.example.a"),
            "past the window, notifications skip the store again"
        )
        let sweep = try await store.removeExpired()
        #expect(sweep.resendRecords >= 1)
        await store.close()
    }

    @Test(
        "A record left pending by a bridge that stopped or crashed holds an unknown outcome: its resend is forwarded at once",
        arguments: StoreKind.available
    )
    func pendingRecordsOfAStoppedBridge(kind: StoreKind) async throws {
        let location = try await kind.makeLocation()
        func key(_ number: Int) -> ResendRecordKey { Self.resendKey(number, digest: 5) }
        // A bridge stops with notifications in flight: their records stay pending.
        var store = try await kind.open(location)
        try await store.remember(
            [
                ResendRecord(key: key(1), outcome: nil, notificationID: Self.notificationID(1)),
                ResendRecord(key: key(2), outcome: .accepted, notificationID: Self.notificationID(2)),
                ResendRecord(key: key(3), outcome: nil),
            ],
            on: Self.eventLoop
        ).get()
        await store.close()
        // The next run (or another instance) claims them: no wait, no invented failure, and
        // the resend goes under the id of the first send, which APNs coalesces with it.
        store = try await kind.open(location)
        try await store.refreshLiveRecords(tenant: "com.example.a", on: Self.eventLoop).get()
        #expect(
            try await store.claim(key(1), on: Self.eventLoop).get()
                == .outcomeUnknown(firstSentAs: Self.notificationID(1))
        )
        #expect(
            try await store.claim(key(3), on: Self.eventLoop).get() == .outcomeUnknown(firstSentAs: nil),
            "a record without an id (written before ids were kept) is forwarded under a new one"
        )
        #expect(
            try await store.claim(key(2), on: Self.eventLoop).get() == .answered(.accepted),
            "an outcome the upstream gave is still kept"
        )
        await store.close()
    }

    @Test(
        "A store of the schema before resend records kept ids is upgraded: its records are forwarded under a new id, new ones keep theirs",
        arguments: StoreKind.available
    )
    func upgradeKeepsRecordsWithoutIDs(kind: StoreKind) async throws {
        let location = try await kind.makeLocation()
        func key(_ number: Int) -> ResendRecordKey { Self.resendKey(number, digest: 7) }
        var store = try await kind.open(location)
        try await store.remember([ResendRecord(key: key(1), outcome: nil)], on: Self.eventLoop).get()
        await store.close()
        // Back to the previous schema, as a bridge of the release before wrote it.
        try await StoredValueTests.execute(
            kind == .sqlite
                ? [
                    "ALTER TABLE resend_records DROP COLUMN notification_id", "DROP TABLE push_failures",
                    "PRAGMA user_version = 2",
                ]
                : [
                    "ALTER TABLE resend_records DROP COLUMN notification_id", "DROP TABLE push_failures",
                    "DELETE FROM apns_bridge_schema WHERE version >= 4",
                ],
            in: location
        )
        // A resend comes after its record: a claim takes only records made before it began.
        let clock = TestClock(Date())
        var configuration = BridgeStoreConfiguration()
        configuration.now = clock.function
        store = try await kind.open(location, configuration: configuration)
        try await store.remember(
            [ResendRecord(key: key(2), outcome: .dropped, notificationID: Self.notificationID(2))],
            on: Self.eventLoop
        ).get()
        clock.advance(by: 1)
        try await store.refreshLiveRecords(tenant: "com.example.a", on: Self.eventLoop).get()
        #expect(try await store.claim(key(1), on: Self.eventLoop).get() == .outcomeUnknown(firstSentAs: nil))
        #expect(
            try await store.claim(key(2), on: Self.eventLoop).get()
                == .outcomeUnknown(firstSentAs: Self.notificationID(2))
        )
        await store.close()
    }

    @Test(
        "PostgreSQL: a claim on one instance waits for the outcome while the owning instance lives, and not once it crashed",
        .enabled(if: TestDatabases.postgresURL != nil, "APNS_BRIDGE_TEST_POSTGRES_URL is not set; run scripts/test"),
        .timeLimit(.minutes(1))
    )
    func pendingRecordsOfACrashedInstance() async throws {
        let location = try await StoreKind.postgres.makeLocation()
        // The wall clock stands still, so no record expires: a claim that waited for an owner
        // that is gone would wait past the time limit.
        let clock = TestClock(Date(timeIntervalSince1970: 1_800_000_000))
        var configuration = BridgeStoreConfiguration()
        configuration.now = clock.function
        let other = try await StoreKind.postgres.open(location, configuration: configuration)
        // The instance that will crash renews its heartbeat only once an hour.
        var crashing = configuration
        crashing.instanceHeartbeatInterval = .seconds(3600)
        let owner = try #require(
            try await StoreKind.postgres.open(location, configuration: crashing) as? PostgresBridgeStore
        )
        func key(_ number: Int) -> ResendRecordKey { Self.resendKey(number, digest: 6) }
        try await owner.remember(
            [
                ResendRecord(key: key(1), outcome: nil),
                ResendRecord(key: key(2), outcome: nil, notificationID: Self.notificationID(2)),
            ],
            on: Self.eventLoop
        ).get()
        try await other.refreshLiveRecords(tenant: "com.example.a", on: Self.eventLoop).get()

        // The owner lives: the other instance's claim waits for the outcome the owner stores.
        let waiting = other.claim(key(1), on: Self.eventLoop)
        try await owner.resolve(key(1), outcome: .rejected(.invalidToken), on: Self.eventLoop).get()
        #expect(try await waiting.get() == .answered(.rejected(.invalidToken)))

        // The owner crashes: its last heartbeat is older than the lease (20 s by default).
        try await owner.client.query(
            "UPDATE bridge_instances SET heartbeat_at = now() - interval '1 minute' WHERE id = \(owner.instanceID)",
            logger: Logger.forTests("apns-bridge.test.store")
        )
        #expect(
            try await other.claim(key(2), on: Self.eventLoop).get()
                == .outcomeUnknown(firstSentAs: Self.notificationID(2)),
            "another instance forwards it again under the id the crashed one sent it with"
        )
        await other.close()
        await owner.close()
    }
}

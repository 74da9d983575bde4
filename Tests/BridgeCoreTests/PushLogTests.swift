import BridgeCore
import LegacyProtocol
import NIOCore
import Testing

@Suite("Push log: a bounded ring of what became of each notification")
struct PushLogTests {
    static func token(_ first: UInt8) -> ByteBuffer {
        ByteBuffer(bytes: [first] + (1..<32).map { UInt8($0) })
    }

    static func entry(
        identifier: UInt32,
        token: ByteBuffer = Self.token(0xAB),
        status: UInt16 = 200,
        outcome: NotificationOutcome = .accepted,
        forwardedAt: NIODeadline = .now(),
        keepingBytes: Bool = false
    ) -> PushLogEntry {
        PushLogEntry(
            forwardedAt: forwardedAt,
            tenant: "shop",
            environment: .sandbox,
            command: .itemized,
            identifier: NotificationIdentifier(rawValue: identifier),
            token: PushLogEntry.Token(token),
            apnsID: ForwardedNotification.ID(high: 7, low: UInt64(identifier)),
            status: status,
            outcome: outcome,
            tokenBytes: keepingBytes ? Array(token.readableBytesView) : nil
        )
    }

    @Test("At its bound the ring drops the oldest: newest first, numbered in order, counts kept")
    func dropsTheOldest() {
        let log = PushLog(capacity: 3)
        for identifier in 1...5 {
            log.record(Self.entry(identifier: UInt32(identifier)))
        }
        let entries = log.entries(matching: PushLogQuery())
        #expect(entries.map(\.identifier.rawValue) == [5, 4, 3])
        #expect(entries.map(\.sequence) == [5, 4, 3])
        #expect(log.counts.held == 3 && log.counts.recorded == 5)
        // One more turns the ring past its start again.
        log.record(Self.entry(identifier: 6))
        #expect(log.entries(matching: PushLogQuery()).map(\.identifier.rawValue) == [6, 5, 4])
    }

    @Test("A whole token finds its entries by hash; a prefix of 1 to 4 bytes by prefix; the entry keeps neither whole")
    func tokenLookup() {
        let log = PushLog(capacity: 10)
        log.record(Self.entry(identifier: 1, token: Self.token(0xAB)))
        log.record(Self.entry(identifier: 2, token: Self.token(0xCD)))
        var query = PushLogQuery()
        query.tokenHash = PushLog.tokenHash(Self.token(0xAB))
        let found = log.entries(matching: query)
        #expect(found.map(\.identifier.rawValue) == [1])
        #expect(found.first?.tokenBytes == nil && found.first?.details == nil, "nothing but fixed-size fields")
        #expect(found.first?.tokenDisplay == "ab010203…")
        query = PushLogQuery()
        query.tokenPrefix = [0xCD, 0x01]
        #expect(log.entries(matching: query).map(\.identifier.rawValue) == [2])
        query.tokenPrefix = [0xCD, 0x02]
        #expect(log.entries(matching: query).isEmpty)
    }

    @Test("With full tokens configured an entry shows every byte")
    func fullTokens() {
        let entry = Self.entry(identifier: 1, keepingBytes: true)
        let hex = (1..<32).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
        #expect(entry.tokenDisplay == "ab" + hex)
        #expect(entry.token.length == 32)
    }

    @Test("The token hash is the same over a buffer and over bytes, for every length around the 8-byte words")
    func tokenHashes() {
        var seen = Set<UInt64>()
        for length in 0...40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            let hash = PushLog.tokenHash(ByteBuffer(bytes: bytes))
            #expect(hash == PushLog.tokenHash(bytes))
            seen.insert(hash)
        }
        #expect(seen.count == 41, "each length hashes apart")
    }

    @Test("An entry's time is kept on the monotonic clock and read back as wall-clock milliseconds")
    func times() {
        let now = NIODeadline.now()
        let entry = Self.entry(identifier: 1, forwardedAt: now - .seconds(60))
        let wall = PushLog.receivedMilliseconds(of: Self.entry(identifier: 2, forwardedAt: now))
        let received = PushLog.receivedMilliseconds(of: entry)
        // A minute apart, give or take the two reads of the clocks.
        #expect((59_900...60_100).contains(wall - received), "\(wall - received) ms")
    }

    @Test("Identifier, apns-id, status, failures, since and limit each narrow the search")
    func filters() {
        let log = PushLog(capacity: 10)
        let now = NIODeadline.now()
        log.record(Self.entry(identifier: 1, forwardedAt: now - .seconds(3_600)))
        log.record(
            Self.entry(
                identifier: 2,
                status: 410,
                outcome: .unregistered(timestamp: 5),
                forwardedAt: now - .seconds(60)
            )
        )
        log.record(Self.entry(identifier: 3, status: 400, outcome: .rejected(.invalidToken), forwardedAt: now))
        let tenMinutesAgo = PushLog.receivedMilliseconds(of: Self.entry(identifier: 0, forwardedAt: now)) - 600_000
        func identifiers(_ change: (inout PushLogQuery) -> Void) -> [UInt32] {
            var query = PushLogQuery()
            change(&query)
            return log.entries(matching: query).map(\.identifier.rawValue)
        }
        #expect(identifiers { $0.identifier = NotificationIdentifier(rawValue: 2) } == [2])
        #expect(identifiers { $0.apnsID = ForwardedNotification.ID(high: 7, low: 3) } == [3])
        #expect(identifiers { $0.status = 410 } == [2])
        #expect(identifiers { $0.failuresOnly = true } == [3, 2])
        #expect(identifiers { $0.since = tenMinutesAgo } == [3, 2])
        #expect(identifiers { $0.limit = 1 } == [3])
        #expect(identifiers { $0.tenant = "other" } == [])
    }

    @Test(
        "Failures wait for the store apart from the ring, oldest first; the bound drops the oldest and counts them; put back, they come first"
    )
    func failuresForTheStore() {
        let log = PushLog(capacity: 3, keepsFailuresForStore: true)
        #expect(log.takeUnstoredFailures().failures.isEmpty, "an empty log")
        for identifier in 1...10 {
            let failed = identifier % 2 == 0
            log.record(
                Self.entry(
                    identifier: UInt32(identifier),
                    status: failed ? 400 : 200,
                    outcome: failed ? .rejected(.invalidToken) : .accepted
                )
            )
        }
        // Five failures (2, 4, 6, 8, 10) for a bound of 3; the ring holds 8 to 10.
        let taken = log.takeUnstoredFailures()
        #expect(taken.failures.map(\.identifier.rawValue) == [6, 8, 10] && taken.dropped == 2)
        #expect(log.entries(matching: PushLogQuery()).map(\.identifier.rawValue) == [10, 9, 8])
        let again = log.takeUnstoredFailures()
        #expect(again.failures.isEmpty && again.dropped == 0, "taken once")

        // The store refused 8 and 10; 12 came meanwhile: 8, 10, 12, in order. Another put back
        // beyond the bound is dropped and counted.
        log.record(Self.entry(identifier: 12, status: 410, outcome: .unregistered(timestamp: 1)))
        log.putBackUnstoredFailures(taken.failures.dropFirst())
        log.putBackUnstoredFailures([Self.entry(identifier: 99, status: 400, outcome: .rejected(.invalidToken))])
        let retried = log.takeUnstoredFailures()
        #expect(retried.failures.map(\.identifier.rawValue) == [8, 10, 12] && retried.dropped == 1)

        // Without a store, nothing waits.
        let alone = PushLog(capacity: 3)
        alone.record(Self.entry(identifier: 1, status: 400, outcome: .rejected(.invalidToken)))
        #expect(alone.takeUnstoredFailures().failures.isEmpty)
    }

    @Test("What the provider was told, by outcome")
    func told() {
        #expect(Self.entry(identifier: 1).told == "nothing")
        #expect(Self.entry(identifier: 1, outcome: .unregistered(timestamp: 1)).told == "feedback list")
        #expect(Self.entry(identifier: 1, outcome: .rejected(.invalidToken)).told == "error-response 8 (invalid token)")
        #expect(
            Self.entry(identifier: 1, outcome: .gaveUp(.processingError)).told == "error-response 1 (processing error)"
        )
        #expect(Self.entry(identifier: 1, outcome: .dropped).told == "nothing (dropped)")
    }
}

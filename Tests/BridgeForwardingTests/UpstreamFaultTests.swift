import BridgeCore
import BridgeForwarding
import BridgeTestSupport
import Foundation
import LegacyClient
import LegacyProtocol
import MockAPNs
import NIOCore
import NIOPosix
import Testing
import UpstreamAPNs

/// Sends `count` notifications with at most `concurrency` outstanding; returns their outcomes
/// by seed.
func sendMany(
    _ harness: UpstreamHarness,
    count: Int,
    concurrency: Int = 50,
    seedOffset: Int = 0
) async throws -> [Int: NotificationOutcome] {
    try await withThrowingTaskGroup(of: (Int, NotificationOutcome).self) { group in
        var outcomes: [Int: NotificationOutcome] = [:]
        var next = 0
        func launch() {
            let seed = seedOffset + next
            next += 1
            group.addTask { (seed, try await harness.send(UpstreamHarness.notification(seed))) }
        }
        while next < min(concurrency, count) { launch() }
        while let (seed, outcome) = try await group.next() {
            outcomes[seed] = outcome
            if next < count { launch() }
        }
        return outcomes
    }
}

// Serialized: these are load tests with timing bounds (PING detection, retry budgets); run one
// at a time they do not starve each other on a 2-core machine.
@Suite("Upstream client against MockAPNs: faults", .serialized)
struct UpstreamFaultTests {
    @Test("10,000 notifications with a GOAWAY every 1,000 streams: lost 0, duplicated 0")
    func goAwayEveryThousand() async throws {
        // What is tested is the GOAWAY: a request the mock processed is answered on its old
        // connection, one it did not is sent again. (The harness's request timeout bounds only
        // a hang: a late answer reset and sent again could be delivered twice.)
        let harnessStarted = try await UpstreamHarness.start(configureClient: { $0.connectionsPerPool = 2 })
        try await withResource(harnessStarted) { harness throws in
            harness.mock.script.goAway(every: 1_000, reason: .shutdown)
            let outcomes = try await sendMany(harness, count: 10_000)

            #expect(outcomes.count == 10_000)
            #expect(outcomes.values.allSatisfy { $0 == .accepted })
            let accepted = harness.mock.ledger.accepted
            let perToken = Dictionary(grouping: accepted, by: \.token).mapValues(\.count)
            #expect(perToken.count == 10_000, "lost: \(10_000 - perToken.count)")
            #expect(
                perToken.values.allSatisfy { $0 == 1 },
                """
                duplicated: \(perToken.values.filter { $0 > 1 }.count); \
                timeouts: \(harness.counter("apns_bridge_upstream_request_timeouts_total")), \
                retries: \(harness.counter("apns_bridge_upstream_retries_total"))
                """
            )
            let counters = harness.mock.ledger.counters
            #expect(counters.goAways >= 9)
            #expect(counters.unprocessed >= counters.goAways, "each GOAWAY left streams unprocessed")
            // Every request the mock left unprocessed was sent again exactly once more than it was
            // answered: answered = accepted (no other statuses were scripted).
            #expect(counters.answered == 10_000)
            #expect(harness.client.connectionsOpened(.sandbox) >= counters.goAways)
        }
    }

    @Test("ExpiredProviderToken: exactly one new token and one retry")
    func expiredProviderToken() async throws {
        try await withResource(try await UpstreamHarness.start()) { harness throws in
            #expect(try await harness.send(UpstreamHarness.notification(1)) == .accepted)
            #expect(harness.tokens.mintCount == 1)
            harness.clock.advance(by: 25 * 60)  // old enough to be replaced (20-minute floor)
            harness.mock.script.fail(1, status: 403, reason: .expiredProviderToken)
            #expect(try await harness.send(UpstreamHarness.notification(2)) == .accepted)
            #expect(harness.tokens.mintCount == 2)
            let records = harness.mock.ledger.records.filter {
                $0.token == FrameBuilder.token(2).hexDump(format: .compact)
            }
            #expect(records.map(\.status) == [403, 200], "one refusal, one retry")
            #expect(harness.counter("apns_bridge_upstream_retries_total") == 1)
        }
    }

    @Test("20,000 notifications over 34 simulated hours: at most one token per 20 minutes")
    func tokenMintRate() async throws {
        try await withResource(try await UpstreamHarness.start(configureClient: { $0.connectionsPerPool = 2 })) {
            harness in
            let start = harness.clock.now
            // Every 200 notifications the clock moves 20.5 minutes; every 2,000 APNs also says a
            // token expired (which may not mint a token within 20 minutes of the last).
            for batch in 0..<100 {
                if batch % 10 == 5 {
                    harness.mock.script.fail(1, status: 403, reason: .expiredProviderToken)
                }
                let outcomes = try await sendMany(harness, count: 200, seedOffset: batch * 200)
                #expect(outcomes.values.allSatisfy { $0 == .accepted })
                harness.clock.advance(by: 20.5 * 60)
            }
            let elapsed = harness.clock.now.timeIntervalSince(start)
            let mints = harness.tokens.mintCount
            #expect(harness.mock.ledger.counters.accepted == 20_000)
            #expect(mints <= Int(elapsed / (20 * 60)) + 1, "\(mints) tokens in \(elapsed / 3600) hours")
            // Tokens were refreshed (every 50 minutes), never used past APNs' one-hour limit.
            #expect(mints >= Int(elapsed / (60 * 60)))
            let ages = harness.mock.ledger.records.compactMap(\.tokenIssuedAt)
            #expect(Set(ages).count == mints)
        }
    }

    @Test("The stream limit is never exceeded while the mock changes MAX_CONCURRENT_STREAMS (500 → 1 → 500)")
    func streamLimitChanges() async throws {
        try await withResource(
            try await UpstreamHarness.start(
                configureMock: { $0.maximumConcurrentStreams = 500 },
                configureClient: { $0.connectionsPerPool = 1 }
            )
        ) { harness in
            harness.mock.script.delayResponses(by: .milliseconds(2))
            async let outcomes = sendMany(harness, count: 6_000, concurrency: 1_000)
            #expect(await harness.mock.ledger.waitForAccepted(1_000))
            harness.mock.setMaximumConcurrentStreams(1)
            #expect(await harness.mock.ledger.waitForAccepted(1_300))
            let openDuringLimitOfOne = harness.mock.ledger.counters.maximumOpenStreams
            harness.mock.setMaximumConcurrentStreams(500)
            let results = try await outcomes
            #expect(results.values.allSatisfy { $0 == .accepted })
            #expect(harness.mock.ledger.counters.accepted == 6_000)
            #expect(harness.mock.ledger.counters.streamLimitViolations == 0)
            #expect(harness.mock.ledger.counters.maximumOpenStreams <= 500)
            #expect(openDuringLimitOfOne <= 500)
        }
    }

    @Test(
        "A server allowing 2 streams per connection: while notifications wait, the pool opens more connections, up to its maximum, and delivers each once"
    )
    func growsWhileEveryStreamIsTaken() async throws {
        try await withResource(
            try await UpstreamHarness.start(
                configureMock: { $0.maximumConcurrentStreams = 2 },
                configureClient: {
                    $0.connectionsPerPool = 1
                    $0.maximumConnectionsPerPool = 3
                }
            )
        ) { harness in
            harness.mock.script.delayResponses(by: .milliseconds(20))
            let outcomes = try await sendMany(harness, count: 200, concurrency: 200)
            #expect(outcomes.count == 200 && outcomes.values.allSatisfy { $0 == .accepted })
            let perToken = Dictionary(grouping: harness.mock.ledger.accepted, by: \.token).mapValues(\.count)
            #expect(perToken.count == 200 && perToken.values.allSatisfy { $0 == 1 })
            // The second connection opens at the first answer, with 198 waiting; a third when
            // the second has answered and notifications still wait (on a slow machine the
            // first two may have carried them all by then). Never a fourth.
            let opened = harness.client.connectionsOpened(.sandbox)
            #expect((2...3).contains(opened), "\(opened) connections")
            #expect(harness.counter("apns_bridge_upstream_connections_opened_total") == Int64(opened))
            #expect(harness.mock.ledger.counters.streamLimitViolations == 0)
            #expect(harness.mock.ledger.counters.maximumOpenStreams <= 2)
        }
    }

    @Test("APNs answering after 5 s: 1,000 notifications through fresh connections, each delivered once")
    func slowUpstreamDeliversOnce() async throws {
        // A new connection carries one stream until its first 200 (authentication tokens), so 998 of
        // these wait 5 s for room, then 5 s for their answers: 10 s after their attempt began,
        // which is the request timeout. Counted from the queue, it reset them just as their
        // answers came and sent them again (1,022 of 4,000 delivered twice); counted from the
        // write, each has its whole timeout. So this test runs with the product's timeout, not
        // the harness's.
        let harnessStarted = try await UpstreamHarness.start(configureClient: {
            $0.connectionsPerPool = 2
            $0.requestTimeout = APNsClient.Configuration().requestTimeout
        })
        try await withResource(harnessStarted) { harness in
            harness.mock.script.delayResponses(by: .seconds(5))
            let outcomes = try await sendMany(harness, count: 1_000, concurrency: 1_000)

            #expect(outcomes.count == 1_000)
            #expect(outcomes.values.allSatisfy { $0 == .accepted })
            let perToken = Dictionary(grouping: harness.mock.ledger.accepted, by: \.token).mapValues(\.count)
            #expect(perToken.count == 1_000, "lost: \(1_000 - perToken.count)")
            #expect(
                perToken.values.allSatisfy { $0 == 1 },
                "delivered twice: \(perToken.values.filter { $0 > 1 }.count)"
            )
            #expect(harness.counter("apns_bridge_upstream_retries_total") == 0, "no request was reset and sent again")
            // Each first 200 raised its connection's one stream to the server's limit before it
            // let a waiter out: neither pool saw a full connection and opened another.
            #expect(harness.client.connectionsOpened(.sandbox) == 2)
        }
    }

    @Test(
        "An upstream that answers PINGs but never a stream: each attempt's stream is reset, retried within the budget, then status 1"
    )
    func unansweredStreamsAreBounded() async throws {
        try await withResource(
            try await UpstreamHarness.start(configureClient: {
                $0.retryBudget = .seconds(2)
                $0.requestTimeout = .milliseconds(400)
                $0.pingInterval = .milliseconds(200)
            })
        ) { harness in
            harness.mock.script.delayResponses(by: .seconds(150))
            let outcomes = try await sendMany(harness, count: 3, concurrency: 3)
            #expect(outcomes.count == 3)
            #expect(outcomes.values.allSatisfy { $0 == .gaveUp(.processingError) })
            #expect(
                harness.mock.ledger.counters.answered == 0,
                "nothing was answered: the budget, not an answer, ended the wait"
            )
            #expect(harness.mock.ledger.counters.pingsReceived > 0, "the connection stayed healthy by its PINGs")
            #expect(
                harness.counter("apns_bridge_upstream_retries_total") >= 3,
                "each notification was tried again after its first stream was reset"
            )
        }
    }

    @Test(
        "Every attempt of one notification carries the same apns-collapse-id (its apns-id); two notifications never share one",
        arguments: APNsHTTP2Engine.available
    )
    func attemptsShareOneCollapseID(engine: APNsHTTP2Engine) async throws {
        try await withResource(
            try await UpstreamHarness.start(configureClient: {
                $0.engine = engine
                $0.requestTimeout = .milliseconds(300)
                $0.retryBudget = .seconds(4)
            })
        ) { harness in
            // A first 200 raises the connection's one stream to the server's limit.
            #expect(try await harness.send(UpstreamHarness.notification(0)) == .accepted)
            harness.mock.ledger.reset()
            // Then every answer comes after its attempt was reset: APNs processed the attempt
            // (the mock records it when it answers), the bridge sent the notification again.
            // Each notification is processed at least twice: the duplicates at-least-once makes.
            harness.mock.script.delayResponses(by: .seconds(2))
            let notifications = 5
            _ = try await sendMany(harness, count: notifications, concurrency: notifications, seedOffset: 1)
            let processedTwice = await harness.mock.ledger.waitForRecords { records in
                let perToken = Dictionary(grouping: records, by: \.token)
                return perToken.count == notifications && perToken.values.allSatisfy { $0.count >= 2 }
            }
            #expect(
                processedTwice,
                "\(Dictionary(grouping: harness.mock.ledger.records, by: \.token).mapValues(\.count).values.sorted()) attempts recorded; \(harness.mock.ledger.counters)"
            )
            let records = harness.mock.ledger.records
            #expect(records.allSatisfy { $0.collapseID != nil && $0.collapseID == $0.apnsID })
            let collapseIDs = Dictionary(grouping: records, by: \.token).mapValues { Set($0.map(\.collapseID)) }
            #expect(collapseIDs.values.allSatisfy { $0.count == 1 }, "one collapse id per notification")
            #expect(Set(collapseIDs.values.flatMap { $0 }).count == notifications, "none shared")
        }
    }

    @Test("A connection whose PINGs go unanswered is replaced within two ping intervals")
    func unansweredPings() async throws {
        try await withResource(
            try await UpstreamHarness.start(configureClient: {
                $0.pingInterval = .milliseconds(500)
                $0.connectionsPerPool = 1
            })
        ) { harness throws in
            #expect(try await harness.send(UpstreamHarness.notification(1)) == .accepted)
            #expect(harness.client.connectionsOpened(.sandbox) == 1)
            harness.mock.script.ignorePings(true)
            // Closed at the first interval that finds its PING unanswered: one PING ignored (two
            // if one was already on its way when the mock stopped answering), counted in PINGs
            // rather than in seconds, which a loaded machine stretches.
            try await eventually("the stalled connection to close", timeout: .seconds(60)) {
                harness.mock.connectionCount == 0
            }
            let ignored = harness.mock.ledger.counters.pingsIgnored
            #expect((1...2).contains(ignored), "closed after \(ignored) unanswered PINGs")
            harness.mock.script.ignorePings(false)
            #expect(try await harness.send(UpstreamHarness.notification(2)) == .accepted)
            // Replaced. (On a very loaded machine a slow PING answer may replace a healthy
            // connection too, so this is a lower bound.)
            #expect(harness.client.connectionsOpened(.sandbox) >= 2)
        }
    }

    @Test("300 REFUSED_STREAM resets in 30 s: the connection is replaced, refused streams resent, nothing lost")
    func refusedStreams() async throws {
        try await withResource(try await UpstreamHarness.start(configureClient: { $0.connectionsPerPool = 1 })) {
            harness in
            #expect(try await harness.send(UpstreamHarness.notification(0)) == .accepted)
            harness.mock.script.refuseStreams(300)
            let outcomes = try await sendMany(harness, count: 2_000, seedOffset: 1)
            #expect(outcomes.values.allSatisfy { $0 == .accepted })
            let perToken = Dictionary(grouping: harness.mock.ledger.accepted, by: \.token).mapValues(\.count)
            #expect(perToken.count == 2_001)
            #expect(perToken.values.allSatisfy { $0 == 1 })
            #expect(harness.mock.ledger.counters.refused == 300)
            #expect(harness.client.connectionsOpened(.sandbox) >= 2, "the refusing connection was replaced")
        }
    }

    @Test("A dropped connection: interrupted requests are retried on a new connection")
    func droppedConnection() async throws {
        try await withResource(try await UpstreamHarness.start(configureClient: { $0.connectionsPerPool = 1 })) {
            harness in
            harness.mock.script.dropConnections(after: 50)
            let outcomes = try await sendMany(harness, count: 120, concurrency: 20)
            harness.mock.script.dropConnections(after: nil)
            #expect(outcomes.values.allSatisfy { $0 == .accepted })
            #expect(Set(harness.mock.ledger.accepted.map(\.token)).count == 120)
            #expect(harness.mock.ledger.counters.dropped >= 2)
        }
    }
}

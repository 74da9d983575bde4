import BridgeCore
import BridgeStores
import LegacyProtocol
import Logging
import NIOCore
import Testing

/// The drain loop both stores run, over a list held in memory: what a claim whose answer was
/// lost does to the entries it claimed. The stores' own tests (StoreBehaviourTests,
/// StoreOutageTests) run the same loop on SQLite and PostgreSQL, where such a claim cannot be
/// made on purpose.
@Suite("Feedback drain loop")
struct FeedbackDrainLoopTests {
    /// Entries by id: the batch of the one drain that claimed each, `nil` while unclaimed. As
    /// the stores' SQL does, a claim first deletes the delivered batches it is given, then takes
    /// the lowest unclaimed ids (retaking: also those the drain holds outside the deleted
    /// batches); the release deletes its range and unclaims everything else.
    struct List {
        var claims: [Int: Int?]

        init(count: Int) {
            self.claims = Dictionary(uniqueKeysWithValues: (0..<count).map { ($0, nil) })
        }

        mutating func delete(_ batches: ClosedRange<Int>?) {
            guard let batches else { return }
            self.claims = self.claims.filter { _, batch in !(batch.map(batches.contains) ?? false) }
        }

        mutating func claim(batch: Int, deleting: ClosedRange<Int>?, retaking: Bool, size: Int) -> [Int] {
            self.delete(deleting)
            let ids = self.claims.filter { _, claimed in
                guard let claimed else { return true }
                return retaking && !(deleting?.contains(claimed) ?? false)
            }.keys.sorted().prefix(size)
            for id in ids { self.claims[id] = batch }
            return Array(ids)
        }

        mutating func release(deleting: ClosedRange<Int>?) {
            self.delete(deleting)
            for id in self.claims.keys { self.claims[id] = .some(nil) }
        }
    }

    struct ConnectionLost: Error {}

    static func tuple(_ id: Int) -> FeedbackTuple {
        var token = ByteBuffer()
        token.writeInteger(UInt32(id))
        return FeedbackTuple(timestamp: 1000, deviceToken: token)
    }

    /// Drains the list in batches of 2 (a minute of outage budget, its poller connected
    /// throughout) with the claims and releases given: the result, and the ids delivered in order.
    static func drain(
        health: StoreHealth = StoreHealth(logger: Logger(label: "test")),
        claim: (_ batch: Int, _ deleting: ClosedRange<Int>?, _ retaking: Bool) async throws -> [Int],
        release: (_ deleting: ClosedRange<Int>?) async throws -> Void
    ) async throws -> (result: FeedbackDrainResult, delivered: [Int]) {
        var delivered: [Int] = []
        let result = try await FeedbackDrainLoop.run(
            batchSize: 2,
            health: health,
            retryWhile: { true },
            outageBudget: .seconds(60),
            pollerConnected: { true },
            deliver: { tuples in
                delivered += tuples.map { Int($0.deviceToken.getInteger(at: 0, as: UInt32.self)!) }
            },
            finish: {},
            claim: { try await claim($0, $1, $2).map(Self.tuple) },
            release: release
        )
        return (result, delivered)
    }

    @Test(
        "A claim committed whose answer was lost: the retry takes its entries back and delivers them; every entry once, in order, none left",
        arguments: [1, 2, 3]
    )
    func lostClaimAnswer(failingClaim: Int) async throws {
        var list = List(count: 8)
        var claims = 0
        let health = StoreHealth(logger: Logger(label: "test"))
        let (result, delivered) = try await Self.drain(
            health: health,
            claim: { batch, deleting, retaking in
                claims += 1
                let ids = list.claim(batch: batch, deleting: deleting, retaking: retaking, size: 2)
                // The statement committed; its answer never arrives (the connection ended).
                if claims == failingClaim { throw ConnectionLost() }
                return ids
            },
            release: { deleting in list.release(deleting: deleting) }
        )
        #expect(delivered == Array(0..<8))
        #expect(result == FeedbackDrainResult(delivered: 8, completed: true))
        #expect(list.claims.isEmpty, "everything delivered is deleted, nothing stays claimed")
        #expect(health.currentOutage == nil, "the claim that went through after the failure cleared the outage")
    }

    @Test(
        "A claim whose statement commits only after its retry (its rows locked, PostgreSQL's SKIP LOCKED let the retry pass them): its entries are neither delivered nor deleted; the release leaves them for the next poll",
        arguments: [1, 2, 3]
    )
    func claimCommittedAfterItsRetry(failingClaim: Int) async throws {
        var list = List(count: 8)
        var claims = 0
        var late: (batch: Int, deleting: ClosedRange<Int>?, retaking: Bool)?
        var lateIDs: [Int] = []
        let (result, delivered) = try await Self.drain(
            claim: { batch, deleting, retaking in
                claims += 1
                // The statement is still running when its connection ends: no answer, no commit yet.
                if claims == failingClaim {
                    late = (batch, deleting, retaking)
                    throw ConnectionLost()
                }
                let ids = list.claim(batch: batch, deleting: deleting, retaking: retaking, size: 2)
                // It commits after the retry, on the rows the retry left.
                if let attempt = late {
                    lateIDs = list.claim(
                        batch: attempt.batch,
                        deleting: attempt.deleting,
                        retaking: attempt.retaking,
                        size: 2
                    )
                    late = nil
                }
                return ids
            },
            release: { deleting in list.release(deleting: deleting) }
        )
        #expect(lateIDs.count == 2)
        #expect(Set(delivered).count == delivered.count, "nothing delivered twice")
        #expect(Set(delivered).isDisjoint(with: lateIDs))
        #expect(list.claims.keys.sorted() == lateIDs.sorted(), "what the late claim took stays, and only that")
        #expect(list.claims.values.allSatisfy { $0 == nil }, "released for the next poll")
        #expect(result == FeedbackDrainResult(delivered: 6, completed: true))
    }

    @Test("A claim that fails while its poller has gone ends the drain without an error; what was delivered is deleted")
    func failureAfterThePollerLeft() async throws {
        var list = List(count: 4)
        var connected = true
        let result = try await FeedbackDrainLoop.run(
            batchSize: 2,
            health: StoreHealth(logger: Logger(label: "test")),
            retryWhile: { true },
            outageBudget: .seconds(60),
            pollerConnected: { connected },
            deliver: { _ in connected = false },
            finish: {},
            claim: { batch, deleting, retaking in
                if !connected { throw ConnectionLost() }
                return list.claim(batch: batch, deleting: deleting, retaking: retaking, size: 2).map(Self.tuple)
            },
            release: { deleting in list.release(deleting: deleting) }
        )
        #expect(result == FeedbackDrainResult(delivered: 2, completed: false))
        #expect(list.claims.keys.sorted() == [2, 3])
    }
}

import BridgeCore
import BridgeStores
import BridgeTestSupport
import Foundation
import LegacyProtocol
import Logging
import NIOCore
import NIOPosix
import Testing

/// The shared store goes away and comes back (docs/operations.md#store-outage): a PostgreSQL
/// server of the test's own is stopped (`pg_ctl stop -m fast`, whose sessions end with 57P01)
/// or killed (SIGKILL to the postmaster) while the gateway's writes and lookups are on their
/// way, and started again on the same data. Nothing that was handed to the store is lost:
/// feedback changes and resend outcomes wait and are written when it answers, a lookup waits
/// (within the outage budget) instead of failing, and the store's health says what happened.
@Suite("Store outage (a PostgreSQL of the test's own, stopped and killed)")
struct StoreOutageTests {
    static let eventLoop = MultiThreadedEventLoopGroup.singleton.any()

    enum Cut: String, CaseIterable, Sendable {
        case fastStop
        case kill
    }

    static func key(_ n: Int) -> ResendRecordKey {
        ResendRecordKey(
            tenant: "com.example.a",
            deviceToken: StoreBehaviourTests.token(n),
            payloadDigest: .init(bytes: (UInt64(n), 2, 3, 4)),
            priority: 10
        )
    }

    @Test(
        "PostgreSQL stopped or killed with writes and lookups on their way, three times: every 410 reaches its list once, every outcome reaches the claim waiting for it, no lookup fails, and the health shows the outage while it lasts",
        .enabled(if: PostgresCluster.binaries != nil || interopRequired),
        arguments: Cut.allCases
    )
    func outage(cut: Cut) async throws {
        try await withResource(try await PostgresCluster.start()) { cluster in
            var configuration = BridgeStoreConfiguration()
            // Longer than a restart on a loaded machine can take: what is tested is that nothing
            // is lost or failed, not how fast PostgreSQL starts.
            configuration.outageBudget = .seconds(120)
            // The heartbeat notices a server that does not answer within its interval.
            configuration.instanceHeartbeatInterval = .seconds(1)
            // A statement on a connection to the killed server is given up (and retried) soon.
            configuration.statementTimeout = .seconds(3)
            let store = try await StoreKind.postgres.open(cluster.url, configuration: configuration)
            do {
                try await Self.cutThreeTimes(cut, cluster: cluster, store: store)
            } catch {
                await store.close()
                throw error
            }
            await store.close()
        }
    }

    static func cutThreeTimes(_ cut: Cut, cluster: PostgresCluster, store: any BridgeStore) async throws {
        for round in 0..<3 {
            let base = round * 100
            // Before the cut: a farewell's records, one pending (its outcome comes during
            // the outage), and a committed 410.
            try await store.remember([ResendRecord(key: Self.key(base + 1), outcome: nil)], on: Self.eventLoop)
                .get()
            try await StoreBehaviourTests.apply([StoreBehaviourTests.unregistered(base)], to: store)

            switch cut {
            case .fastStop: try await cluster.stopFast()
            case .kill: try cluster.kill()
            }
            // During the outage: a 410, the pending record's outcome, and the resend's
            // lookup, which waits for that outcome.
            let entry = store.apply(StoreBehaviourTests.unregistered(base + 2), on: Self.eventLoop)
            let resolved = store.resolve(
                Self.key(base + 1),
                outcome: .rejected(.invalidToken),
                on: Self.eventLoop
            )
            let claim = store.claim(Self.key(base + 1), on: Self.eventLoop)
            try await eventually("the store's health to show the outage") { store.health.currentOutage != nil }

            try await cluster.startServer()
            try await entry.get()
            try await resolved.get()
            #expect(try await claim.get() == .answered(.rejected(.invalidToken)), "round \(round)")
            try await eventually("the store's health to clear") { store.health.currentOutage == nil }
            #expect(store.health.writesWaiting == 0)
        }
        let tuples = try await StoreBehaviourTests.drainAll(store)
        let numbers = StoreBehaviourTests.tokenNumbers(tuples).sorted()
        #expect(numbers == [0, 2, 100, 102, 200, 202], "each 410 once")
    }
}

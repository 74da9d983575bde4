import BridgeApp
import BridgeCore
import BridgeStores
import BridgeTestSupport
import Foundation
import LegacyProtocol
import Logging
import NIOCore
import Synchronization
import Testing

/// The push log's failures reach the store (docs/operations.md#did-it-go): only failures, each
/// once, every field kept; what the bound dropped before a copy is counted and passed over; a copy the store
/// refused is made again by the next.
@Suite("Push log failure writer")
struct PushFailureWriterTests {
    static func entry(_ identifier: UInt32, status: UInt16, outcome: NotificationOutcome) -> PushLogEntry {
        PushLogEntry(
            forwardedAt: .now(),
            tenant: "shop",
            environment: .production,
            command: .itemized,
            identifier: NotificationIdentifier(rawValue: identifier),
            token: PushLogEntry.Token(ByteBuffer(bytes: [0xAB] + (1..<32).map { UInt8($0) })),
            apnsID: ForwardedNotification.ID(
                high: 0x1234_0000_0000_4000,
                low: 0x8000_0000_0000_0000 | UInt64(identifier)
            ),
            status: status,
            attempts: 1,
            outcome: outcome,
            reason: status == 200 ? nil : "BadDeviceToken"
        )
    }

    /// The real store, refusing the writes it is told to refuse (a store that does not answer).
    final class RefusingStore: PushFailureStore {
        let store: any BridgeStore
        let refusals = Mutex(0)

        init(_ store: any BridgeStore) { self.store = store }

        struct Refused: Error {}

        func recordPushFailures(_ failures: [StoredPushFailure]) async throws {
            let refuse = self.refusals.withLock { refusals in
                defer { refusals = max(0, refusals - 1) }
                return refusals > 0
            }
            if refuse { throw Refused() }
            try await self.store.recordPushFailures(failures)
        }

        func pushFailures(matching query: PushLogQuery) async throws -> [StoredPushFailure] {
            try await self.store.pushFailures(matching: query)
        }
    }

    @Test(
        "Only failures are written, each once, every field kept; a dropped entry is passed over; a refused copy is made again"
    )
    func copiesFailures() async throws {
        let store = try await StoreKind.sqlite.open(try await StoreKind.sqlite.makeLocation())
        let refusing = RefusingStore(store)
        let log = PushLog(capacity: 4, keepsFailuresForStore: true)
        let writer = PushFailureWriter(pushLog: log, store: refusing, logger: Logger(label: "test"))

        log.record(Self.entry(1, status: 200, outcome: .accepted))
        log.record(Self.entry(2, status: 400, outcome: .rejected(.invalidToken)))
        log.record(Self.entry(3, status: 410, outcome: .unregistered(timestamp: 1)))
        #expect(await writer.copy() == 2)
        #expect(await writer.copy() == 0, "nothing new")
        let stored = try await store.pushFailures(matching: PushLogQuery())
        #expect(stored.map(\.entry.identifier.rawValue) == [3, 2])
        #expect(stored.allSatisfy { $0.run == log.run })
        // Every field of the entry but its monotonic time, which means nothing outside the process.
        let inMemory = log.entries(matching: PushLogQuery()).filter { !$0.isAccepted }.map {
            var entry = $0
            entry.forwardedAt = .uptimeNanoseconds(0)
            return entry
        }
        #expect(stored.map(\.entry) == inMemory)
        #expect(
            stored.first?.entry.reason == "BadDeviceToken" && stored.first?.entry.outcome == .unregistered(timestamp: 1)
        )

        // Six more, four of them waiting at most: 4 and 5 are dropped before any copy.
        for identifier in 4...9 {
            log.record(Self.entry(UInt32(identifier), status: 400, outcome: .rejected(.invalidToken)))
        }
        refusing.refusals.withLock { $0 = 1 }
        #expect(await writer.copy() == 0, "the store refused")
        #expect(await writer.copy() == 4, "the next copy makes it")
        let after = try await store.pushFailures(matching: PushLogQuery())
        #expect(after.map(\.entry.identifier.rawValue).sorted() == [2, 3, 6, 7, 8, 9])
        await store.close()
    }
}

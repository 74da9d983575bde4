import BridgeCore
import BridgeStores
import BridgeTestSupport
import Foundation
import Logging
import NIOCore
import PostgresNIO
import Testing

/// PostgreSQL: a resend outcome written by one instance wakes a claim waiting for it on another
/// at once, through `NOTIFY` (docs/protocol.md#resend-records), rather than at its next check.
@Suite("Resend outcomes notified across instances (PostgreSQL)")
struct ResendOutcomeNotificationTests {
    @Test(
        "Writing a resend outcome notifies its record on the channel every instance listens on, and the claim on the other instance gets it",
        .enabled(if: TestDatabases.postgresURL != nil, "APNS_BRIDGE_TEST_POSTGRES_URL is not set; run scripts/test"),
        .timeLimit(.minutes(1))
    )
    func outcomeIsNotified() async throws {
        let location = try await StoreKind.postgres.makeLocation()
        let owner = try await StoreKind.postgres.open(location)
        let other = try await StoreKind.postgres.open(location)
        let key = StoreOutageTests.key(11)
        try await owner.remember([ResendRecord(key: key, outcome: nil)], on: StoreOutageTests.eventLoop).get()
        try await other.refreshLiveRecords(tenant: key.tenant, on: StoreOutageTests.eventLoop).get()

        var logger = Logger(label: "test.postgres")
        logger.logLevel = .error
        let client = PostgresClient(
            configuration: try PostgresBridgeStore.clientConfiguration(url: location),
            backgroundLogger: logger
        )
        let notified = try await withThrowingTaskGroup(of: String?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            defer { group.cancelAll() }
            return try await client.withConnection { connection in
                try await connection.listen(on: "apns_bridge_resend_outcomes") { notifications -> String? in
                    let claim = other.claim(key, on: StoreOutageTests.eventLoop)
                    try await owner.resolve(key, outcome: .accepted, on: StoreOutageTests.eventLoop).get()
                    #expect(try await claim.get() == .answered(.accepted))
                    for try await notification in notifications { return notification.payload }
                    return nil
                }
            }
        }
        #expect(notified.flatMap { Int64($0) } != nil, "the record's id: \(String(describing: notified))")
        await other.close()
        await owner.close()
    }
}

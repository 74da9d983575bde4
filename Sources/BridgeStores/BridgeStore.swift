import BridgeCore
import Foundation
import Logging
import NIOCore

/// The durable store (docs/feedback.md#stores): feedback lists and resend records in one database.
///
/// - ``SQLiteBridgeStore``: a local file, the embedded default for one instance.
/// - ``PostgresBridgeStore``: a PostgreSQL database shared by several instances behind a TCP
///   load balancer.
///
/// Both pass the same behavioural tests (`Tests/StoreTests`).
package protocol BridgeStore: FeedbackStore, ResendRecordStore, UsageStore, PushFailureStore {
    var configuration: BridgeStoreConfiguration { get }

    /// The tokens that may be on a feedback list; a 200 for any other token does not reach the
    /// database (docs/feedback.md#on-the-list).
    var feedbackListFilter: FeedbackListFilter { get }

    /// Whether the store answers, and what waits for it to answer again
    /// (docs/operations.md#store-outage).
    var health: StoreHealth { get }

    /// Removes feedback entries older than the retention, expired resend records, claims left
    /// behind by a drain that never finished, and usage and push failures older than the usage
    /// retention. Runs periodically (see
    /// ``BridgeStoreMaintenance``); returns the rows removed.
    func removeExpired() async throws -> StoreSweep

    /// Stops accepting writes, commits what is queued, and closes the database connection. A
    /// second call does nothing.
    func close() async
}

extension BridgeStore {
    /// Runs `body` with the store, then closes it, whether `body` returned or threw.
    func closing<Result>(after body: (Self) async throws -> Result) async throws -> Result {
        let result: Result
        do {
            result = try await body(self)
        } catch {
            await self.close()
            throw error
        }
        await self.close()
        return result
    }

    package func mayBeOnList(_ key: FeedbackKey) -> Bool {
        self.feedbackListFilter.mayContain(key.deviceToken, on: key.list)
    }
}

extension BridgeStoreConfiguration {
    var nowMilliseconds: Int64 {
        Int64((self.now().timeIntervalSince1970 * 1000).rounded(.down))
    }

    var nowSeconds: Int64 {
        Int64(self.now().timeIntervalSince1970.rounded(.down))
    }
}

extension Duration {
    var milliseconds: Int64 {
        let (seconds, attoseconds) = self.components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    var timeAmount: TimeAmount {
        .nanoseconds(self.milliseconds * 1_000_000)
    }
}

/// A drain's claim: unique across processes and instances.
enum DrainClaim {
    static func make() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(generator.next(), radix: 16) + String(generator.next(), radix: 16)
    }
}

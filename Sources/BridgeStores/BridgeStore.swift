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
public protocol BridgeStore: FeedbackStore, ResendRecordStore, UsageStore {
    var configuration: BridgeStoreConfiguration { get }

    /// The tokens that may be on a feedback list; a 200 for any other token does not reach the
    /// database (docs/feedback.md#on-the-list).
    var feedbackListFilter: FeedbackListFilter { get }

    /// Removes feedback entries older than the retention, expired resend records, claims left
    /// behind by a drain that never finished, and usage older than its retention. Runs periodically (see
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

    public func mayBeOnList(_ key: FeedbackKey) -> Bool {
        self.feedbackListFilter.mayContain(key.deviceToken, on: key.list)
    }
}

/// Settings shared by the stores.
public struct BridgeStoreConfiguration: Sendable {
    /// Feedback entries not polled within this time are removed (docs/feedback.md: retention is
    /// bounded). Default 30 days: cron jobs poll daily.
    public var feedbackRetention: Duration = .seconds(30 * 24 * 3600)
    /// How long a resend record is kept (docs/protocol.md#resend-records: 2 minutes by default).
    public var resendRecordWindow: Duration = .seconds(120)
    /// A claim older than this is taken to belong to a drain that died with its process, and its
    /// entries are served again. Longer than the longest drain (a million entries take seconds).
    public var claimLease: Duration = .seconds(30 * 60)
    /// Feedback changes waiting for a commit beyond this are refused (and logged by the
    /// gateway): a store that is down must not grow memory without bound.
    public var maximumQueuedFeedbackChanges: Int = 100_000
    /// How often a claim of a pending resend record checks for its outcome.
    public var resendOutcomePollInterval: Duration = .milliseconds(20)
    /// PostgreSQL only: how often an instance renews its heartbeat, and how long after the last
    /// renewal the other instances take it for gone (crashed), so that the resends of what it
    /// had in flight are forwarded again instead of waiting (docs/protocol.md#resend-records). An instance that
    /// stops cleanly says so at once.
    public var instanceHeartbeatInterval: Duration = .seconds(5)
    public var instanceLease: Duration = .seconds(20)
    /// Usage (per tenant and day: the migration view) older than this is removed. Default 400
    /// days: a year, compared with the same weeks of the year before.
    public var usageRetention: Duration = .seconds(400 * 24 * 3600)
    /// SQLite only: `FULL` (the default) fsyncs every commit, so a commit survives a power cut;
    /// `NORMAL` survives a crash or `kill -9` of the process as soon as the commit returns, and
    /// commits several times faster, so a 410 is durable sooner (docs/feedback.md measures it).
    public var sqliteSynchronous: SQLiteBridgeStore.Synchronous = .full
    /// The wall clock (records and entries outlive the process, so not a monotonic clock).
    public var now: @Sendable () -> Date = { Date() }

    public init() {}
}

/// What ``BridgeStore/removeExpired()`` removed.
public struct StoreSweep: Hashable, Sendable {
    public var feedbackEntries: Int
    public var resendRecords: Int
    public var releasedClaims: Int
    /// Usage rows (per tenant and day) older than the usage retention.
    public var usageRows: Int

    public init(feedbackEntries: Int, resendRecords: Int, releasedClaims: Int, usageRows: Int = 0) {
        self.feedbackEntries = feedbackEntries
        self.resendRecords = resendRecords
        self.releasedClaims = releasedClaims
        self.usageRows = usageRows
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

/// The store's retention sweep: ``BridgeStore/removeExpired()``, which `serve` runs every
/// ``interval`` as one of its periodic jobs.
public enum BridgeStoreMaintenance {
    /// How often `serve` sweeps.
    public static let interval: Duration = .seconds(600)

    /// One ``BridgeStore/removeExpired()``, logged when it removed anything or failed.
    public static func sweepOnce(_ store: any BridgeStore, logger: Logger) async {
        do {
            let sweep = try await store.removeExpired()
            if sweep != StoreSweep(feedbackEntries: 0, resendRecords: 0, releasedClaims: 0) {
                logger.info(
                    "store maintenance",
                    metadata: [
                        "feedback_entries_expired": "\(sweep.feedbackEntries)",
                        "resend_records_removed": "\(sweep.resendRecords)",
                        "stale_claims_released": "\(sweep.releasedClaims)",
                        "usage_rows_expired": "\(sweep.usageRows)",
                    ]
                )
            }
        } catch {
            logger.error("store maintenance failed", metadata: ["error": "\(error)"])
        }
    }
}

/// Opens the store a URL names: `sqlite:PATH` for the embedded store, `postgres://…` for the
/// shared one.
public enum BridgeStoreLocation {
    public static func open(
        _ location: String,
        configuration: BridgeStoreConfiguration = .init(),
        logger: Logger
    ) async throws -> any BridgeStore {
        if location.hasPrefix("postgres://") || location.hasPrefix("postgresql://") {
            return try await PostgresBridgeStore.connect(url: location, configuration: configuration, logger: logger)
        }
        if location.hasPrefix("sqlite:") {
            let path = String(location.dropFirst("sqlite:".count))
            guard !path.isEmpty else { throw StoreError.invalidURL("sqlite: needs a file path") }
            return try await SQLiteBridgeStore.open(
                path: path,
                configuration: configuration,
                synchronous: configuration.sqliteSynchronous,
                logger: logger
            )
        }
        throw StoreError.invalidURL("\(location): expected sqlite:PATH or postgres://user@host/database")
    }

    /// Opens the store `location` names, runs `body` with it, and closes it when `body` returns
    /// or throws (a store already closed stays closed). The store's background work (the
    /// feedback commits; for PostgreSQL also its client, LISTEN and heartbeat) runs as child
    /// tasks of this call.
    public static func withStore<Result: Sendable>(
        _ location: String,
        configuration: BridgeStoreConfiguration = .init(),
        logger: Logger,
        _ body: (any BridgeStore) async throws -> Result
    ) async throws -> Result {
        if location.hasPrefix("postgres://") || location.hasPrefix("postgresql://") {
            return try await PostgresBridgeStore.withStore(url: location, configuration: configuration, logger: logger)
            { try await body($0) }
        }
        guard location.hasPrefix("sqlite:"), case let path = String(location.dropFirst("sqlite:".count)), !path.isEmpty
        else {
            throw StoreError.invalidURL("\(location): expected sqlite:PATH or postgres://user@host/database")
        }
        return try await SQLiteBridgeStore.withStore(
            path: path,
            configuration: configuration,
            synchronous: configuration.sqliteSynchronous,
            logger: logger
        ) {
            try await body($0)
        }
    }

    /// The location without a password, for logs and `check-config`.
    public static func redacted(_ location: String) -> String {
        location.hasPrefix("sqlite:") ? location : PostgresBridgeStore.redacted(location)
    }
}

/// Errors of the stores themselves (the database libraries' errors pass through).
public enum StoreError: Error, CustomStringConvertible {
    case schemaTooNew(found: Int, known: Int)
    case invalidURL(String)
    /// A store whose schema predates usage (`apns-bridge report` on it).
    case noUsage(found: Int)
    /// A database server that did not accept a connection (the location, redacted; the cause).
    case unreachable(String, String)

    public var description: String {
        switch self {
        case .unreachable(let location, let cause):
            "cannot connect to \(location): \(cause)"
        case .noUsage(let found):
            "the store has no usage yet (schema version \(found)): a bridge of this version records it once it has opened the store"
        case .schemaTooNew(let found, let known):
            "the database's schema version \(found) is newer than this apns-bridge knows (\(known)); upgrade apns-bridge"
        case .invalidURL(let reason):
            "invalid store URL: \(reason)"
        }
    }
}

/// A drain's claim: unique across processes and instances.
enum DrainClaim {
    static func make() -> String {
        var generator = SystemRandomNumberGenerator()
        return String(generator.next(), radix: 16) + String(generator.next(), radix: 16)
    }
}

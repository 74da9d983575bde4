import BridgeCore
import Foundation
import LegacyProtocol
import Logging
import NIOCore
import SQLiteNIO
import Synchronization

// Over 400 lines, on purpose: this is the SQL of every `BridgeStore` operation for SQLite
// (feedback lists, drains, resend records, maintenance), each next to the transaction helper it
// runs through, so that one file shows everything one store does to its tables. The usage
// tables are in SQLiteUsage.swift.

/// The embedded store: one SQLite file, for one bridge process (docs/feedback.md#stores).
///
/// WAL journal; `synchronous=FULL` by default, so a commit survives a power cut as well as a
/// crash. One connection: SQLite has one writer at a time anyway, and every operation here
/// writes. Statements run on NIO's thread pool; a transaction's statements take turns through
/// an ``AsyncSerialLock``.
///
/// One process per file: at open, claims left by a drain of a previous run (which died before
/// it could delete or release them) are released at once, and resend records that run left
/// pending can no longer get an outcome: they are marked unknown, so their resends are
/// forwarded again at once (docs/protocol.md#resend-records).
package final class SQLiteBridgeStore: BridgeStore {
    package enum Synchronous: String, Sendable {
        /// A commit is on disk before it returns: survives crashes and power cuts.
        case full = "FULL"
        /// WAL with `NORMAL`: survives a crash of the process; a power cut may lose the last
        /// commits.
        case normal = "NORMAL"
    }

    /// The schema this code writes; `PRAGMA user_version` holds the file's. 2 added the usage
    /// tables (``SQLiteUsage``), 3 the id a resend record's notification went upstream with, 4
    /// the push log's failures (``SQLitePushFailures``).
    static let schemaVersion = 4

    package let configuration: BridgeStoreConfiguration
    package let path: String
    let connection: SQLiteConnection
    let lock: AsyncSerialLock
    private let batcher: FeedbackWriteBatcher
    /// The batcher's commits (``FeedbackWriteBatcher/run()``).
    private let committer: BackgroundWork
    /// Set by the first ``close()``: a second one does nothing.
    private let isClosed = Mutex(false)
    private let logger: Logger
    /// Per tenant, UNIX milliseconds after which no unclaimed resend record can be live: until
    /// then, a notification of that tenant needs a claim; after it, it is new without one.
    /// Exact, since this process is the file's only writer.
    private let horizons: ResendRecordHorizons
    /// The tokens that may be on a feedback list: a 200 for any other token skips the store.
    /// Exact at open and kept current by this process, the file's only writer.
    package let feedbackListFilter: FeedbackListFilter
    package let health: StoreHealth
    /// Claims waiting for an outcome (every outcome is this process's).
    private let outcomeWaiters = ResendOutcomeWaiters()

    private init(
        path: String,
        connection: SQLiteConnection,
        lock: AsyncSerialLock,
        configuration: BridgeStoreConfiguration,
        horizons: ResendRecordHorizons,
        feedbackListFilter: FeedbackListFilter,
        health: StoreHealth,
        logger: Logger
    ) {
        self.path = path
        self.connection = connection
        self.lock = lock
        self.configuration = configuration
        self.logger = logger
        self.horizons = horizons
        self.feedbackListFilter = feedbackListFilter
        self.health = health
        let batcher = FeedbackWriteBatcher(
            maximumQueued: configuration.maximumQueuedFeedbackChanges,
            filter: feedbackListFilter,
            health: health
        ) { batch in
            try await lock.withLock {
                if Self.statementCount(batch) == 1 {
                    // One statement is atomic by itself: no BEGIN and COMMIT around it, which are
                    // two more trips to the thread pool before a 410 is durable (the usual batch:
                    // a few 410s, or a few 200s clearing tokens).
                    try await Self.write(batch, to: connection, now: configuration.nowSeconds)
                } else {
                    try await Self.transaction(connection) {
                        try await Self.write(batch, to: connection, now: configuration.nowSeconds)
                    }
                }
            }
        }
        self.batcher = batcher
        self.committer = BackgroundWork { await batcher.run() }
    }

    /// Opens the store, runs `body` with it, and closes it when `body` returns or throws; the
    /// batcher's commits run as a child task of this call. (The bridge opens its store this way.)
    package static func withStore<Result: Sendable>(
        path: String,
        configuration: BridgeStoreConfiguration = .init(),
        synchronous: Synchronous = .full,
        logger: Logger = Logger(label: "apns-bridge.store"),
        _ body: (SQLiteBridgeStore) async throws -> Result
    ) async throws -> Result {
        let store = try await Self.openWithoutCommits(
            path: path,
            configuration: configuration,
            synchronous: synchronous,
            logger: logger
        )
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await store.committer.run() }
            return try await store.closing(after: body)
        }
    }

    /// Opens (creating when needed) the database file and brings its schema up to date, for a
    /// store not opened in a scope (the tests): `backgroundWork` runs its commits where the
    /// caller decides, until ``close()``, which must be called. The bridge uses
    /// ``withStore(path:configuration:synchronous:logger:_:)``.
    package static func open(
        path: String,
        configuration: BridgeStoreConfiguration = .init(),
        synchronous: Synchronous = .full,
        logger: Logger = Logger(label: "apns-bridge.store"),
        backgroundWork: (BackgroundWork) -> Void
    ) async throws -> SQLiteBridgeStore {
        let store = try await Self.openWithoutCommits(
            path: path,
            configuration: configuration,
            synchronous: synchronous,
            logger: logger
        )
        backgroundWork(store.committer)
        return store
    }

    private static func openWithoutCommits(
        path: String,
        configuration: BridgeStoreConfiguration,
        synchronous: Synchronous,
        logger: Logger
    ) async throws -> SQLiteBridgeStore {
        let connection = try await SQLiteConnection.open(storage: .file(path: path), logger: logger)
        do {
            let lock = AsyncSerialLock()
            let health = StoreHealth(logger: logger)
            // SQLiteNIO's busy handler retries a locked file at once, for ever: a writer of
            // another process holding the lock (a `sqlite3` shell in a transaction, a backup
            // tool) would hold every write of this store and spin a thread. With a timeout the
            // statement waits up to 1 s, then fails with SQLITE_BUSY: the store's health shows
            // it and what must be written is retried (docs/operations.md#store-outage).
            _ = try await connection.query("PRAGMA busy_timeout = 1000")
            _ = try await connection.query("PRAGMA journal_mode = WAL")
            _ = try await connection.query("PRAGMA synchronous = \(synchronous.rawValue)")
            try await Self.migrate(connection, logger: logger)
            let released = try await connection.query(
                "UPDATE feedback_entries SET claim = NULL, claim_batch = NULL, claimed_at = NULL WHERE claim IS NOT NULL RETURNING id"
            ).count
            if released > 0 {
                logger.notice(
                    "released feedback entries claimed by an unfinished drain of a previous run",
                    metadata: ["entries": "\(released)"]
                )
            }
            let orphaned = try await connection.query(
                "UPDATE resend_records SET outcome = ?, outcome_value = 0 WHERE outcome IS NULL RETURNING id",
                [.integer(Int(StoredOutcome.unknown))]
            ).count
            if orphaned > 0 {
                logger.notice(
                    "resend records of a previous run had no outcome: their resends will be forwarded again",
                    metadata: ["records": "\(orphaned)"]
                )
            }
            let horizons = ResendRecordHorizons()
            for row in try await connection.query(
                "SELECT tenant, max(expires_at) AS until FROM resend_records WHERE claimed = 0 GROUP BY tenant"
            ) {
                guard let tenant = row.column("tenant")?.string,
                    let until = row.storedInteger("until", corrupt: health.corruptValues)
                else {
                    continue
                }
                horizons.extend(tenant: tenant, until: Int64(until))
            }
            let feedbackListFilter = FeedbackListFilter()
            try await Self.rebuild(feedbackListFilter, connection: connection, lock: lock)
            logger.info(
                "store opened",
                metadata: [
                    "backend": "sqlite", "path": "\(path)", "synchronous": "\(synchronous.rawValue)",
                    "feedback_entries": "\(feedbackListFilter.count)",
                ]
            )
            return SQLiteBridgeStore(
                path: path,
                connection: connection,
                lock: lock,
                configuration: configuration,
                horizons: horizons,
                feedbackListFilter: feedbackListFilter,
                health: health,
                logger: logger
            )
        } catch {
            try? await connection.close()
            throw error
        }
    }

    /// Commits what is queued and closes the file. A second call does nothing.
    package func close() async {
        guard
            !self.isClosed.withLock({ closed in
                defer { closed = true }
                return closed
            })
        else { return }
        await self.batcher.close()
        self.batcher.finish()
        await self.committer.stop()
        try? await self.lock.withLock { try await self.connection.close() }
    }

    // MARK: Schema

    private static func migrate(_ connection: SQLiteConnection, logger: Logger) async throws {
        let version =
            try await connection.query("PRAGMA user_version").first?.column("user_version")?.storedInteger ?? 0
        if version > Self.schemaVersion {
            throw StoreError.schemaTooNew(found: Int(version), known: Self.schemaVersion)
        }
        if version < 1 {
            try await Self.createSchema1(connection, logger: logger)
        }
        if version < 2 {
            try await Self.transaction(connection) {
                for statement in SQLiteUsage.schema + ["PRAGMA user_version = 2"] {
                    _ = try await connection.query(statement)
                }
            }
            logger.info("store schema updated", metadata: ["backend": "sqlite", "version": "2"])
        }
        if version < 3 {
            // Rows of earlier schemas keep NULL: their resends go upstream under a new id.
            try await Self.transaction(connection) {
                for statement in [
                    "ALTER TABLE resend_records ADD COLUMN notification_id BLOB",
                    "PRAGMA user_version = 3",
                ] {
                    _ = try await connection.query(statement)
                }
            }
            logger.info("store schema updated", metadata: ["backend": "sqlite", "version": "3"])
        }
        if version < 4 {
            try await Self.transaction(connection) {
                for statement in SQLitePushFailures.schema + ["PRAGMA user_version = 4"] {
                    _ = try await connection.query(statement)
                }
            }
            logger.info("store schema updated", metadata: ["backend": "sqlite", "version": "4"])
        }
    }

    private static func createSchema1(_ connection: SQLiteConnection, logger: Logger) async throws {
        try await Self.transaction(connection) {
            for statement in [
                """
                CREATE TABLE feedback_entries (
                    id INTEGER PRIMARY KEY,
                    tenant TEXT NOT NULL,
                    environment TEXT NOT NULL,
                    token BLOB NOT NULL,
                    timestamp INTEGER NOT NULL,
                    recorded_at INTEGER NOT NULL,
                    claim TEXT,
                    claim_batch INTEGER,
                    claimed_at INTEGER,
                    UNIQUE (tenant, environment, token)
                )
                """,
                "CREATE INDEX feedback_entries_pending ON feedback_entries (tenant, environment, claim, id)",
                "CREATE INDEX feedback_entries_claim ON feedback_entries (claim, claim_batch) WHERE claim IS NOT NULL",
                "CREATE INDEX feedback_entries_recorded ON feedback_entries (recorded_at)",
                """
                CREATE TABLE resend_records (
                    id INTEGER PRIMARY KEY,
                    key_hash BLOB NOT NULL,
                    tenant TEXT NOT NULL,
                    expires_at INTEGER NOT NULL,
                    claimed INTEGER NOT NULL DEFAULT 0,
                    outcome INTEGER,
                    outcome_value INTEGER
                )
                """,
                "CREATE INDEX resend_records_key ON resend_records (key_hash, id)",
                "CREATE INDEX resend_records_expiry ON resend_records (expires_at)",
                "PRAGMA user_version = 1",
            ] {
                _ = try await connection.query(statement)
            }
        }
        logger.info("store schema created", metadata: ["backend": "sqlite", "version": "1"])
    }

    static func transaction<Result>(
        _ connection: SQLiteConnection,
        _ body: () async throws -> Result
    ) async throws -> Result {
        _ = try await connection.query("BEGIN IMMEDIATE")
        do {
            let result = try await body()
            _ = try await connection.query("COMMIT")
            return result
        } catch {
            _ = try? await connection.query("ROLLBACK")
            throw error
        }
    }

    // MARK: Feedback: recording

    package func apply(_ change: FeedbackChange, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        self.batcher.submit(change, on: eventLoop)
    }

    /// Rows per statement: well under SQLite's limit of bound parameters.
    private static let rowsPerStatement = 200

    /// How many statements ``write(_:to:now:)`` runs for a batch.
    private static func statementCount(_ batch: FeedbackWriteBatcher.Batch) -> Int {
        func statements(_ rows: Int) -> Int { (rows + Self.rowsPerStatement - 1) / Self.rowsPerStatement }
        return statements(batch.entries.count) + statements(batch.removals.count)
    }

    private static func write(
        _ batch: FeedbackWriteBatcher.Batch,
        to connection: SQLiteConnection,
        now: Int64
    ) async throws {
        let entries = batch.entries
        let removals = batch.removals
        for start in stride(from: 0, to: entries.count, by: Self.rowsPerStatement) {
            let chunk = entries[start..<min(start + Self.rowsPerStatement, entries.count)]
            var binds: [SQLiteData] = []
            binds.reserveCapacity(chunk.count * 5)
            for entry in chunk {
                binds += [
                    .text(entry.tenant), .text(entry.environment.rawValue), .blob(entry.deviceToken),
                    .integer(Int(entry.timestamp)), .integer(Int(now)),
                ]
            }
            // A newer timestamp replaces the entry and cancels a claim on it: the drain serving
            // the older one must not delete the newer.
            _ = try await connection.query(
                """
                INSERT INTO feedback_entries (tenant, environment, token, timestamp, recorded_at)
                VALUES \(Array(repeating: "(?, ?, ?, ?, ?)", count: chunk.count).joined(separator: ", "))
                ON CONFLICT (tenant, environment, token) DO UPDATE SET
                    timestamp = excluded.timestamp, recorded_at = excluded.recorded_at,
                    claim = NULL, claim_batch = NULL, claimed_at = NULL
                WHERE excluded.timestamp > feedback_entries.timestamp
                """,
                binds
            )
        }
        for start in stride(from: 0, to: removals.count, by: Self.rowsPerStatement) {
            let chunk = removals[start..<min(start + Self.rowsPerStatement, removals.count)]
            var binds: [SQLiteData] = []
            binds.reserveCapacity(chunk.count * 3)
            for key in chunk {
                binds += [.text(key.tenant), .text(key.environment.rawValue), .blob(key.deviceToken)]
            }
            _ = try await connection.query(
                """
                DELETE FROM feedback_entries WHERE (tenant, environment, token) IN
                (VALUES \(Array(repeating: "(?, ?, ?)", count: chunk.count).joined(separator: ", ")))
                """,
                binds
            )
        }
    }

    /// Rebuilds `filter` from every entry's token, 10,000 rows per turn of the lock (a million
    /// entries never sit in memory as rows, and writers get their turns between).
    private static func rebuild(
        _ filter: FeedbackListFilter,
        connection: SQLiteConnection,
        lock: AsyncSerialLock
    ) async throws {
        try await filter.rebuild { found in
            var after = 0
            while true {
                let rows = try await lock.withLock {
                    try await connection.query(
                        "SELECT id, tenant, environment, token FROM feedback_entries WHERE id > ? ORDER BY id LIMIT 10000",
                        [.integer(after)]
                    )
                }
                guard let last = rows.last?.column("id")?.storedInteger else { return }
                after = last
                for row in rows {
                    guard let tenant = row.column("tenant")?.string,
                        let environment = row.column("environment")?.string.flatMap(APNsEnvironment.init(rawValue:)),
                        let token = row.column("token")?.blob
                    else { continue }
                    found(token, FeedbackListFilter.List(tenant: tenant, environment: environment))
                }
            }
        }
    }

    // MARK: Feedback: serving

    package func drain(
        tenant: String,
        environment: APNsEnvironment,
        options: FeedbackDrainOptions,
        pollerConnected: () -> Bool,
        deliver: ([FeedbackTuple]) async throws -> Void,
        finish: () async -> Void
    ) async throws -> FeedbackDrainResult {
        let claim = DrainClaim.make()
        let lengthFilter = options.only32ByteTokens ? "AND length(token) = 32" : ""
        return try await FeedbackDrainLoop.run(
            batchSize: options.batchSize,
            health: self.health,
            retryWhile: { self.isOpen },
            outageBudget: self.configuration.outageBudget,
            pollerConnected: pollerConnected,
            deliver: deliver,
            finish: finish,
            claim: { batch, deleting, retaking in
                let rows = try await self.lock.withLock {
                    guard pollerConnected() else { throw FeedbackDrainLoop.PollerGone() }
                    return try await Self.transaction(self.connection) {
                        if let deleting {
                            try await self.deleteBatches(deleting, of: claim)
                        }
                        return try await self.connection.query(
                            """
                            UPDATE feedback_entries SET claim = ?, claim_batch = ?, claimed_at = ?
                            WHERE id IN (
                                SELECT id FROM feedback_entries
                                WHERE tenant = ? AND environment = ? \(lengthFilter)
                                    AND (claim IS NULL OR (? AND claim = ? AND claim_batch NOT BETWEEN ? AND ?))
                                ORDER BY id LIMIT ?
                            )
                            RETURNING id, token, timestamp
                            """,
                            [
                                .text(claim), .integer(batch), .integer(Int(self.configuration.nowSeconds)),
                                .text(tenant), .text(environment.rawValue),
                                .integer(retaking ? 1 : 0), .text(claim),
                                .integer(deleting?.lowerBound ?? 0), .integer(deleting?.upperBound ?? 0),
                                .integer(options.batchSize),
                            ]
                        )
                    }
                }
                return rows.sorted { ($0.column("id")?.storedInteger ?? 0) < ($1.column("id")?.storedInteger ?? 0) }.map
                {
                    FeedbackTuple(
                        timestamp: UInt32(
                            clamping: $0.storedInteger("timestamp", corrupt: self.health.corruptValues) ?? 0
                        ),
                        deviceToken: $0.column("token")?.blob ?? ByteBuffer()
                    )
                }
            },
            release: { deleting in
                try await self.lock.withLock {
                    try await Self.transaction(self.connection) {
                        if let deleting {
                            try await self.deleteBatches(deleting, of: claim)
                        }
                        _ = try await self.connection.query(
                            "UPDATE feedback_entries SET claim = NULL, claim_batch = NULL, claimed_at = NULL WHERE claim = ?",
                            [.text(claim)]
                        )
                    }
                }
            }
        )
    }

    /// Deletes delivered batches of a drain's claim (within the caller's transaction).
    private func deleteBatches(_ batches: ClosedRange<Int>, of claim: String) async throws {
        _ = try await self.connection.query(
            "DELETE FROM feedback_entries WHERE claim = ? AND claim_batch BETWEEN ? AND ?",
            [.text(claim), .integer(batches.lowerBound), .integer(batches.upperBound)]
        )
    }

    package func pendingEntries(
        tenant: String,
        environment: APNsEnvironment,
        limit: Int
    ) async throws -> [FeedbackEntry] {
        try await self.lock.withLock {
            try await self.connection.query(
                "SELECT token, timestamp FROM feedback_entries WHERE tenant = ? AND environment = ? AND claim IS NULL ORDER BY id LIMIT ?",
                [.text(tenant), .text(environment.rawValue), .integer(limit)]
            )
        }.map {
            FeedbackEntry(
                tenant: tenant,
                environment: environment,
                deviceToken: $0.column("token")?.blob ?? ByteBuffer(),
                timestamp: UInt32(clamping: $0.storedInteger("timestamp", corrupt: self.health.corruptValues) ?? 0)
            )
        }
    }

    package func pendingCount() async throws -> Int {
        try await self.lock.withLock {
            try await self.connection.query("SELECT count(*) AS n FROM feedback_entries")
        }.first?.column("n")?.storedInteger ?? 0
    }

    // MARK: Resend records

    package func remember(_ records: [ResendRecord], on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        let expiresAt = self.configuration.nowMilliseconds + self.configuration.resendRecordWindow.milliseconds
        // Before the insert: a claim racing with it then queries rather than skips.
        for tenant in Set(records.map(\.key.tenant)) {
            self.horizons.extend(tenant: tenant, until: expiresAt)
        }
        let deadline = ContinuousClock.now + self.configuration.outageBudget
        return eventLoop.makeFutureWithTask {
            // The packet waits for these: a file that is briefly locked or full is waited for,
            // within the outage budget, rather than the resends duplicated.
            try await self.health.retrying("resend records", while: { self.isOpen && .now < deadline }) {
                try await self.rememberOnce(records, expiresAt: expiresAt)
            }
        }
    }

    private var isOpen: Bool {
        !self.isClosed.withLock { $0 }
    }

    private func rememberOnce(_ records: [ResendRecord], expiresAt: Int64) async throws {
        try await self.lock.withLock {
            try await Self.transaction(self.connection) {
                for record in records {
                    let (kind, value) = record.outcome.map(StoredOutcome.encode) ?? (-1, 0)
                    _ = try await self.connection.query(
                        """
                        INSERT INTO resend_records (key_hash, tenant, expires_at, outcome, outcome_value, notification_id)
                        VALUES (?, ?, ?, ?, ?, ?)
                        """,
                        [
                            .blob(record.key.storageHash), .text(record.key.tenant), .integer(Int(expiresAt)),
                            kind < 0 ? .null : .integer(Int(kind)), .integer(Int(value)),
                            record.notificationID.map { .blob($0.stored) } ?? .null,
                        ]
                    )
                }
            }
        }
    }

    package func mayHoldLiveRecords(tenant: String) -> Bool {
        self.horizons.mayHoldLiveRecords(tenant: tenant) { self.configuration.nowMilliseconds }
    }

    package func resolve(
        _ key: ResendRecordKey,
        outcome: NotificationOutcome,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<Void> {
        guard self.mayHoldLiveRecords(tenant: key.tenant) else { return eventLoop.makeSucceededVoidFuture() }
        let (kind, value) = StoredOutcome.encode(outcome)
        let deadline = ContinuousClock.now + self.configuration.resendRecordWindow
        return eventLoop.makeFutureWithTask {
            // A claim waits for this outcome: a failed write is retried, never dropped.
            let updated = try await self.health.retrying("resend outcome", while: { self.isOpen && .now < deadline }) {
                try await self.lock.withLock {
                    try await self.connection.query(
                        """
                        UPDATE resend_records SET outcome = ?, outcome_value = ?
                        WHERE id = (SELECT id FROM resend_records WHERE key_hash = ? AND outcome IS NULL ORDER BY id LIMIT 1)
                        RETURNING id
                        """,
                        [.integer(Int(kind)), .integer(Int(value)), .blob(key.storageHash)]
                    )
                }
            }
            for row in updated {
                if let id = row.column("id")?.storedInteger { self.outcomeWaiters.wake(Int64(id)) }
            }
        }
    }

    package func claim(_ key: ResendRecordKey, on eventLoop: any EventLoop) -> EventLoopFuture<ResendClaim> {
        guard self.mayHoldLiveRecords(tenant: key.tenant) else { return eventLoop.makeSucceededFuture(.new) }
        let deadline = ContinuousClock.now + self.configuration.outageBudget
        // Only records made before the claim began: a notification whose lookup waits (for the
        // lock, or a locked file) can be in its own connection's farewell meanwhile, and taking
        // that record would wait for its own outcome until the record expired. A real resend's
        // record is always older than the resend: the error-response is written after it.
        let madeBefore = self.configuration.nowMilliseconds + self.configuration.resendRecordWindow.milliseconds
        return eventLoop.makeFutureWithTask {
            let now = self.configuration.nowMilliseconds
            let row = try await self.health.retrying(
                "resend lookup",
                isWrite: false,
                while: { self.isOpen && .now < deadline }
            ) {
                try await self.lock.withLock {
                    try await self.connection.query(
                        """
                        UPDATE resend_records SET claimed = 1
                        WHERE id = (
                            SELECT id FROM resend_records
                            WHERE key_hash = ? AND claimed = 0 AND expires_at >= ? AND expires_at < ?
                            ORDER BY id LIMIT 1
                        )
                        RETURNING id, expires_at, outcome, outcome_value, notification_id
                        """,
                        [.blob(key.storageHash), .integer(Int(now)), .integer(Int(madeBefore))]
                    ).first
                }
            }
            guard let row, let id = row.column("id")?.storedInteger else { return .new }
            let firstSentAs = row.column("notification_id")?.blob.flatMap(ForwardedNotification.ID.init(stored:))
            var outcomeRow = row
            let expiresAt = Int64(row.storedInteger("expires_at", corrupt: self.health.corruptValues) ?? 0)
            // A pending record is this process's (records of a previous run were marked unknown
            // at open): its outcome is on its way, bounded by the upstream's retry budget, and
            // its resolve wakes this wait. Should it not come before the record expires,
            // forward again.
            var checks = 0
            while outcomeRow.column("outcome")?.isNull ?? true {
                if self.configuration.nowMilliseconds > expiresAt { return .outcomeUnknown(firstSentAs: firstSentAs) }
                await self.outcomeWaiters.waitBeforeCheck(
                    of: Int64(id),
                    checks: &checks,
                    limit: self.configuration.resendOutcomeCheckInterval
                )
                let next = try await self.health.retrying(
                    "resend outcome check",
                    isWrite: false,
                    while: { self.isOpen && self.configuration.nowMilliseconds <= expiresAt }
                ) {
                    try await self.lock.withLock {
                        try await self.connection.query(
                            "SELECT outcome, outcome_value FROM resend_records WHERE id = ?",
                            [.integer(id)]
                        ).first
                    }
                }
                guard let next else { return .outcomeUnknown(firstSentAs: firstSentAs) }
                outcomeRow = next
            }
            return StoredOutcome.claim(
                kind: Int64(outcomeRow.storedInteger("outcome", corrupt: self.health.corruptValues) ?? -1),
                value: Int64(outcomeRow.storedInteger("outcome_value", corrupt: self.health.corruptValues) ?? 0),
                firstSentAs: firstSentAs
            )
        }
    }

    // MARK: Maintenance

    package func removeExpired() async throws -> StoreSweep {
        let nowSeconds = self.configuration.nowSeconds
        let nowMilliseconds = self.configuration.nowMilliseconds
        let retentionStart = nowSeconds - self.configuration.feedbackRetention.milliseconds / 1000
        let leaseStart = nowSeconds - self.configuration.claimLease.milliseconds / 1000
        let sweep = try await self.lock.withLock {
            let entries = try await self.connection.query(
                "DELETE FROM feedback_entries WHERE recorded_at < ? AND claim IS NULL RETURNING id",
                [.integer(Int(retentionStart))]
            ).count
            let records = try await self.connection.query(
                "DELETE FROM resend_records WHERE expires_at < ? OR (claimed = 1 AND outcome IS NOT NULL) RETURNING id",
                [.integer(Int(nowMilliseconds))]
            ).count
            let claims = try await self.connection.query(
                "UPDATE feedback_entries SET claim = NULL, claim_batch = NULL, claimed_at = NULL WHERE claimed_at < ? RETURNING id",
                [.integer(Int(leaseStart))]
            ).count
            let usage = try await SQLiteUsage.removeExpired(
                before: UsageDay(unixSeconds: nowSeconds - self.configuration.usageRetention.milliseconds / 1000),
                connection: self.connection
            )
            let failures = try await SQLitePushFailures.removeExpired(
                before: nowMilliseconds - self.configuration.usageRetention.milliseconds,
                connection: self.connection
            )
            return StoreSweep(
                feedbackEntries: entries,
                resendRecords: records,
                releasedClaims: claims,
                usageRows: usage,
                pushFailures: failures
            )
        }
        // Entries served, removed or expired since the last sweep leave the filter.
        try await Self.rebuild(self.feedbackListFilter, connection: self.connection, lock: self.lock)
        return sweep
    }
}

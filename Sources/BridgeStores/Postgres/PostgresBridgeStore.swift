import BridgeCore
import Foundation
import LegacyProtocol
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PostgresNIO
import Synchronization

// Over 400 lines, on purpose: this is the SQL of every `BridgeStore` operation for PostgreSQL
// (feedback lists with their claims, drains, resend records owned by instances, the instance
// heartbeat, the schema's migrations), kept together so that the multi-instance rules
// (docs/scaling.md) read in one place. The usage tables are in PostgresUsage.swift, the LISTEN
// of other instances' entries in FeedbackListNotifications.swift.

/// The shared store: one PostgreSQL database for several bridge instances behind a TCP load
/// balancer (docs/feedback.md#stores, docs/scaling.md).
///
/// Feedback drains claim rows with `FOR UPDATE SKIP LOCKED`, so pollers on different instances
/// never get the same entry; a claim left by an instance that died is released after
/// ``BridgeStoreConfiguration/claimLease``. Resend records live in the database, so a record
/// written by one instance stops a duplicate on any other: a provider connection that starts
/// reads, in one query, until when its tenant may hold live records (written by any instance);
/// while that horizon is in the past, its notifications make no query at all.
///
/// Each instance has an identity (a row in `bridge_instances`, its heartbeat renewed every
/// ``BridgeStoreConfiguration/instanceHeartbeatInterval``) and owns the records it writes. A
/// pending record whose owner closed (it marks its pending records unknown as it closes) or
/// stopped renewing its heartbeat for ``BridgeStoreConfiguration/instanceLease`` (it crashed)
/// can get no outcome any more: its resend is forwarded again (docs/protocol.md#resend-records).
package final class PostgresBridgeStore: BridgeStore {
    /// 2: instances own their resend records; 3: the usage tables (``PostgresUsage``); 4: the id
    /// a resend record's notification went upstream with; 5: the push log's failures
    /// (``PostgresPushFailures``).
    static let schemaVersion = 5
    /// Serialises schema migrations of instances starting at the same time.
    static let migrationLockID: Int64 = 0x6170_6E73_2195

    package let configuration: BridgeStoreConfiguration
    package let client: PostgresClient
    /// The client's own run, which every query needs.
    private let clientRun: BackgroundWork
    private let batcher: FeedbackWriteBatcher
    /// The batcher's commits (``FeedbackWriteBatcher/run()``).
    private let committer: BackgroundWork
    let logger: Logger
    /// What this instance knows of each tenant's live resend records: its own, and what
    /// ``refreshLiveRecords(tenant:on:)`` read of the other instances'.
    private let horizons = ResendRecordHorizons()
    /// The tokens that may be on a feedback list: a 200 for any other token skips the store.
    /// Loaded at connect, rebuilt at each maintenance sweep, and kept current with the other
    /// instances' 410s by `LISTEN` (see ``FeedbackListNotifications``).
    package let feedbackListFilter: FeedbackListFilter
    /// Listens for the other instances' new entries until ``close()``.
    private let listener: BackgroundWork
    /// This instance's identity: the owner of the resend records it writes.
    package let instanceID: String
    /// Renews this instance's heartbeat until ``close()``.
    private let heartbeat: BackgroundWork
    /// Set by the first ``close()``: a second one does nothing.
    private let isClosed = Mutex(false)
    package let health: StoreHealth
    /// Claims waiting for an outcome this instance writes.
    private let outcomeWaiters = ResendOutcomeWaiters()

    private init(
        client: PostgresClient,
        clientRun: BackgroundWork,
        feedbackListFilter: FeedbackListFilter,
        listener: BackgroundWork,
        instanceID: String,
        heartbeat: BackgroundWork,
        health: StoreHealth,
        configuration: BridgeStoreConfiguration,
        logger: Logger
    ) {
        self.client = client
        self.clientRun = clientRun
        self.feedbackListFilter = feedbackListFilter
        self.listener = listener
        self.instanceID = instanceID
        self.heartbeat = heartbeat
        self.configuration = configuration
        self.logger = logger
        self.health = health
        let batcher = FeedbackWriteBatcher(
            maximumQueued: configuration.maximumQueuedFeedbackChanges,
            filter: feedbackListFilter,
            health: health
        ) { batch in
            try await Self.retryingConflicts(logger: logger) {
                try await Self.withConnection(client, timeout: configuration.statementTimeout) { connection in
                    try await connection.withTransaction(logger: logger) { connection in
                        try await Self.write(batch, on: connection, now: configuration.nowSeconds, logger: logger)
                    }
                }
            }
        }
        self.batcher = batcher
        self.committer = BackgroundWork { await batcher.run() }
    }

    /// Connects, runs `body` with the store, and closes it when `body` returns or throws. The
    /// client, the LISTEN for other instances' entries and the heartbeat are child tasks of
    /// this call: nothing of the store outlives it. (The bridge opens its store this way.)
    ///
    /// - Parameter url: `postgres://user:password@host:port/database`, or with
    ///   `?host=/path/to/socket-directory` for a unix socket; `?sslmode=disable|prefer|require`
    ///   (default `prefer`).
    package static func withStore<Result: Sendable>(
        url: String,
        configuration: BridgeStoreConfiguration = .init(),
        maximumConnections: Int = 20,
        logger: Logger = Logger(label: "apns-bridge.store"),
        _ body: (PostgresBridgeStore) async throws -> Result
    ) async throws -> Result {
        try await withThrowingTaskGroup(of: Void.self) { group in
            let store = try await Self.connect(
                url: url,
                configuration: configuration,
                maximumConnections: maximumConnections,
                logger: logger,
                backgroundWork: { work in group.addTask { await work.run() } }
            )
            return try await store.closing(after: body)
        }
    }

    /// Connects and brings the schema up to date. `backgroundWork` runs each piece of the
    /// store's background work where the caller decides: as a child task of
    /// ``withStore(url:configuration:maximumConnections:logger:_:)`` in the bridge, in a task
    /// of its own in the tests, which open stores without a scope and must call ``close()``.
    package static func connect(
        url: String,
        configuration: BridgeStoreConfiguration = .init(),
        maximumConnections: Int = 20,
        logger: Logger = Logger(label: "apns-bridge.store"),
        backgroundWork start: (BackgroundWork) -> Void
    ) async throws -> PostgresBridgeStore {
        try await Self.checkReachable(url: url)
        var clientConfiguration = try Self.clientConfiguration(url: url)
        clientConfiguration.options.maximumConnections = maximumConnections
        let client = PostgresClient(configuration: clientConfiguration, backgroundLogger: logger)
        let clientRun = BackgroundWork { await client.run() }
        start(clientRun)
        let feedbackListFilter = FeedbackListFilter()
        var listener: BackgroundWork?
        let instanceID = DrainClaim.make()
        do {
            try await Self.migrate(client, logger: logger)
            _ = try await Self.withConnection(client, timeout: configuration.statementTimeout) { connection in
                try await connection.query("INSERT INTO bridge_instances (id) VALUES (\(instanceID))", logger: logger)
            }
            // Listening first, then reading: an entry another instance commits meanwhile is
            // either read or notified.
            let (listening, listeningContinuation) = AsyncThrowingStream.makeStream(of: Void.self)
            let listen = BackgroundWork {
                await FeedbackListNotifications.listen(
                    client: client,
                    filter: feedbackListFilter,
                    statementTimeout: configuration.statementTimeout,
                    logger: logger,
                    listening: listeningContinuation
                )
            }
            listener = listen
            start(listen)
            var iterator = listening.makeAsyncIterator()
            _ = try await iterator.next()
            try await Self.rebuild(
                feedbackListFilter,
                client: client,
                timeout: configuration.statementTimeout,
                logger: logger
            )
        } catch {
            await listener?.stop()
            await clientRun.stop()
            throw error
        }
        let health = StoreHealth(logger: logger)
        let heartbeat = BackgroundWork {
            await Self.renewHeartbeat(
                instanceID: instanceID,
                client: client,
                every: configuration.instanceHeartbeatInterval,
                health: health,
                logger: logger
            )
        }
        start(heartbeat)
        let store = PostgresBridgeStore(
            client: client,
            clientRun: clientRun,
            feedbackListFilter: feedbackListFilter,
            listener: listener!,
            instanceID: instanceID,
            heartbeat: heartbeat,
            health: health,
            configuration: configuration,
            logger: logger
        )
        start(store.committer)
        logger.info(
            "store opened",
            metadata: [
                "backend": "postgresql", "url": "\(Self.redacted(url))",
                "feedback_entries": "\(feedbackListFilter.count)",
                "instance": "\(instanceID)",
            ]
        )
        return store
    }

    /// Commits what is queued, then gives up this instance's identity: its records still pending
    /// can get no outcome any more (the upstream was shut down before the store), so they are
    /// marked unknown and their resends are forwarded again on any instance at once. The
    /// background work stops. A second call does nothing.
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
        await self.heartbeat.stop()
        do {
            let orphaned = try await Self.withConnection(
                self.client,
                timeout: self.configuration.statementTimeout
            ) { connection in
                try await connection.withTransaction(logger: self.logger) { connection in
                    let rows = try await connection.query(
                        """
                        UPDATE resend_records SET outcome = \(StoredOutcome.unknown), outcome_value = 0
                        WHERE owner = \(self.instanceID) AND outcome IS NULL RETURNING id
                        """,
                        logger: self.logger
                    )
                    var orphaned = 0
                    for try await _ in rows { orphaned += 1 }
                    try await connection.query(
                        "DELETE FROM bridge_instances WHERE id = \(self.instanceID)",
                        logger: self.logger
                    )
                    return orphaned
                }
            }
            if orphaned > 0 {
                self.logger.notice(
                    "resend records still pending at close: their resends will be forwarded again",
                    metadata: ["records": "\(orphaned)"]
                )
            }
        } catch {
            // The other instances see this one's heartbeat stop: after the lease its records
            // count as unknown all the same.
            self.logger.warning(
                "could not give up this instance's identity",
                metadata: ["error": "\(String(reflecting: error))"]
            )
        }
        await self.listener.stop()
        await self.clientRun.stop()
    }

    /// Renews the heartbeat (the database's clock, so instances' clocks need not agree) until
    /// cancelled. A row another instance removed (this one looked dead, say after a long
    /// partition) is written again: from then on its pending records are live again. Each
    /// renewal tells `health` whether the database answers.
    private static func renewHeartbeat(
        instanceID: String,
        client: PostgresClient,
        every interval: Duration,
        health: StoreHealth,
        logger: Logger
    ) async {
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: interval)
                // While the server is down, postgres-nio queues a query until it can connect
                // (failing it only after 15 s of failed attempts): a renewal that takes longer
                // than the interval counts as a failure, so that the outage shows at once.
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        // Bounded too once it has a connection: the group waits for this task.
                        _ = try await Self.withConnection(client, timeout: interval) { connection in
                            try await connection.query(
                                """
                                INSERT INTO bridge_instances (id) VALUES (\(instanceID))
                                ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()
                                """,
                                logger: logger
                            )
                        }
                    }
                    group.addTask {
                        try await Task.sleep(for: interval)
                        throw HeartbeatTimedOut(after: interval)
                    }
                    defer { group.cancelAll() }
                    try await group.next()
                }
                health.succeeded()
            } catch is CancellationError {
                return
            } catch {
                if Task.isCancelled { return }
                health.failed("heartbeat", error)
            }
        }
    }

    struct HeartbeatTimedOut: Error, CustomStringConvertible {
        var after: Duration
        var description: String { "no answer within \(self.after)" }
    }

    /// Rebuilds `filter` from every entry's token, 10,000 rows per query (each within
    /// `timeout`).
    static func rebuild(
        _ filter: FeedbackListFilter,
        client: PostgresClient,
        timeout: Duration,
        logger: Logger
    ) async throws {
        try await filter.rebuild { found in
            var after: Int64 = 0
            while true {
                let page = try await Self.withConnection(client, timeout: timeout) { [after] connection in
                    var page: [(id: Int64, token: ByteBuffer, list: FeedbackListFilter.List?)] = []
                    let rows = try await connection.query(
                        "SELECT id, tenant, environment, token FROM feedback_entries WHERE id > \(after) ORDER BY id LIMIT 10000",
                        logger: logger
                    )
                    for try await (id, tenant, environment, token) in rows.decode(
                        (Int64, String, String, ByteBuffer).self
                    ) {
                        let list = APNsEnvironment(rawValue: environment).map {
                            FeedbackListFilter.List(tenant: tenant, environment: $0)
                        }
                        page.append((id, token, list))
                    }
                    return page
                }
                for entry in page {
                    if let list = entry.list { found(entry.token, list) }
                }
                guard let last = page.last?.id else { return }
                after = last
            }
        }
    }

    /// The client configuration a store URL names (see ``connect(url:configuration:maximumConnections:logger:)``).
    package static func clientConfiguration(url: String) throws -> PostgresClient.Configuration {
        try Self.parse(url: url).configuration
    }

    /// Where `url` points: a TCP host and port, or a unix socket.
    enum Endpoint: Sendable {
        case tcp(host: String, port: Int)
        case unixSocket(String)
    }

    private static func parse(url: String) throws -> (configuration: PostgresClient.Configuration, endpoint: Endpoint) {
        guard let components = URLComponents(string: url),
            components.scheme == "postgres" || components.scheme == "postgresql"
        else {
            throw StoreError.invalidURL("expected postgres://user:password@host:port/database")
        }
        guard let user = components.user, !user.isEmpty else {
            throw StoreError.invalidURL("no user name")
        }
        // URLComponents takes any number; the socket layer would dial it modulo 65,536.
        if let port = components.port, !(1...65_535).contains(port) {
            throw StoreError.invalidURL("port \(port): expected 1 to 65535")
        }
        let database = components.path.isEmpty ? nil : String(components.path.dropFirst())
        let query = Dictionary(
            (components.queryItems ?? []).map { ($0.name, $0.value ?? "") },
            uniquingKeysWith: { $1 }
        )
        if let socketDirectory = query["host"], socketDirectory.hasPrefix("/") {
            let port = components.port ?? 5432
            let path = "\(socketDirectory)/.s.PGSQL.\(port)"
            let configuration = PostgresClient.Configuration(
                unixSocketPath: path,
                username: user,
                password: components.password,
                database: database
            )
            return (configuration, .unixSocket(path))
        }
        guard let host = components.host, !host.isEmpty else {
            throw StoreError.invalidURL("no host (or ?host=/socket/directory)")
        }
        let tls: PostgresClient.Configuration.TLS
        switch query["sslmode"] ?? "prefer" {
        case "disable": tls = .disable
        case "prefer": tls = .prefer(.makeClientConfiguration())
        case "require": tls = .require(.makeClientConfiguration())
        case let other: throw StoreError.invalidURL("sslmode \(other): expected disable, prefer or require")
        }
        let configuration = PostgresClient.Configuration(
            host: host,
            port: components.port ?? 5432,
            username: user,
            password: components.password,
            database: database,
            tls: tls
        )
        return (configuration, .tcp(host: host, port: components.port ?? 5432))
    }

    /// The server `url` names accepts connections: checked once, within `timeout`, before a
    /// client is made. postgres-nio's client retries an unreachable server with backoff until
    /// its circuit breaker trips (67.5 s, reported as `connectionCreationCircuitBreakerTripped`);
    /// this names the cause ("connection refused", a timeout) at once.
    ///
    /// Then one message of PostgreSQL's startup, an SSLRequest, which a PostgreSQL server answers
    /// with one byte at once: a server that accepts and never speaks (not PostgreSQL, or a proxy
    /// holding the connection) is named within `timeout` too, rather than after postgres-nio's
    /// connection attempts give up (about 70 s) with a message about its circuit breaker.
    package static func checkReachable(url: String, timeout: TimeAmount = .seconds(10)) async throws {
        let endpoint = try Self.parse(url: url).endpoint
        let eventLoop = MultiThreadedEventLoopGroup.singleton.next()
        let answered = eventLoop.makePromise(of: Bool.self)
        let bootstrap = ClientBootstrap(group: eventLoop).connectTimeout(timeout).channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(FirstByteHandler(answered: answered))
            }
        }
        let channel: any Channel
        do {
            switch endpoint {
            case .tcp(let host, let port):
                channel = try await bootstrap.connect(host: host, port: port).get()
            case .unixSocket(let path):
                channel = try await bootstrap.connect(unixDomainSocketPath: path).get()
            }
        } catch {
            answered.succeed(false)
            throw StoreError.unreachable(Self.redacted(url), "\(error)")
        }
        let timer = eventLoop.scheduleTask(in: timeout) { answered.succeed(false) }
        var sslRequest = ByteBuffer()
        sslRequest.writeMultipleIntegers(UInt32(8), UInt32(80_877_103))
        channel.writeAndFlush(sslRequest, promise: nil)
        let spoke = try await answered.futureResult.get()
        timer.cancel()
        try? await channel.close()
        guard spoke else {
            throw StoreError.unreachable(
                Self.redacted(url),
                "the server accepted the connection but did not answer PostgreSQL's first message within \(timeout.nanoseconds / 1_000_000_000) s (is it PostgreSQL, or a proxy holding connections?)"
            )
        }
    }

    /// Completes `answered` with true at the first byte, false when the connection closes first.
    private final class FirstByteHandler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        private let answered: EventLoopPromise<Bool>

        init(answered: EventLoopPromise<Bool>) {
            self.answered = answered
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            self.answered.succeed(true)
        }

        func channelInactive(context: ChannelHandlerContext) {
            self.answered.succeed(false)
            context.fireChannelInactive()
        }
    }

    /// The URL without its password, for logs.
    static func redacted(_ url: String) -> String {
        guard var components = URLComponents(string: url) else { return "(unparseable)" }
        if components.password != nil { components.password = "***" }
        return components.string ?? "(unparseable)"
    }

    // MARK: Schema

    private static func migrate(_ client: PostgresClient, logger: Logger) async throws {
        try await client.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Self.migrationLockID))", logger: logger)
            try await connection.query(
                "CREATE TABLE IF NOT EXISTS apns_bridge_schema (version integer NOT NULL)",
                logger: logger
            )
            var version = 0
            for try await found in try await connection.query(
                "SELECT max(version) FROM apns_bridge_schema",
                logger: logger
            ).decode(Int?.self) {
                version = found ?? 0
            }
            if version > Self.schemaVersion {
                throw StoreError.schemaTooNew(found: version, known: Self.schemaVersion)
            }
            if version < 1 {
                try await Self.createSchema1(connection, logger: logger)
            }
            if version < 2 {
                // Schema 2: instances own their resend records (docs/protocol.md#resend-records). Records written
                // by schema 1 have no owner: pending ones count as unknown.
                let statements: [PostgresQuery] = [
                    """
                    CREATE TABLE bridge_instances (
                        id text PRIMARY KEY,
                        started_at timestamptz NOT NULL DEFAULT now(),
                        heartbeat_at timestamptz NOT NULL DEFAULT now()
                    )
                    """,
                    "ALTER TABLE resend_records ADD COLUMN owner text",
                    "INSERT INTO apns_bridge_schema (version) VALUES (2)",
                ]
                for statement in statements {
                    try await connection.query(statement, logger: logger)
                }
                logger.info("store schema updated", metadata: ["backend": "postgresql", "version": "2"])
            }
            if version < 3 {
                for statement in PostgresUsage.schema + ["INSERT INTO apns_bridge_schema (version) VALUES (3)"] {
                    try await connection.query(statement, logger: logger)
                }
                logger.info("store schema updated", metadata: ["backend": "postgresql", "version": "3"])
            }
            if version < 4 {
                // Rows of earlier schemas keep NULL: their resends go upstream under a new id.
                for statement: PostgresQuery in [
                    "ALTER TABLE resend_records ADD COLUMN notification_id bytea",
                    "INSERT INTO apns_bridge_schema (version) VALUES (4)",
                ] {
                    try await connection.query(statement, logger: logger)
                }
                logger.info("store schema updated", metadata: ["backend": "postgresql", "version": "4"])
            }
            if version < 5 {
                for statement in PostgresPushFailures.schema + ["INSERT INTO apns_bridge_schema (version) VALUES (5)"] {
                    try await connection.query(statement, logger: logger)
                }
                logger.info("store schema updated", metadata: ["backend": "postgresql", "version": "5"])
            }
        }
    }

    private static func createSchema1(_ connection: PostgresConnection, logger: Logger) async throws {
        let statements: [PostgresQuery] = [
            """
            CREATE TABLE feedback_entries (
                id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                tenant text NOT NULL,
                environment text NOT NULL,
                token bytea NOT NULL,
                timestamp bigint NOT NULL,
                recorded_at bigint NOT NULL,
                claim text,
                claim_batch integer,
                claimed_at bigint,
                UNIQUE (tenant, environment, token)
            )
            """,
            "CREATE INDEX feedback_entries_pending ON feedback_entries (tenant, environment, id) WHERE claim IS NULL",
            "CREATE INDEX feedback_entries_claim ON feedback_entries (claim, claim_batch) WHERE claim IS NOT NULL",
            "CREATE INDEX feedback_entries_recorded ON feedback_entries (recorded_at)",
            """
            CREATE TABLE resend_records (
                id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                key_hash bytea NOT NULL,
                tenant text NOT NULL,
                expires_at bigint NOT NULL,
                claimed boolean NOT NULL DEFAULT false,
                outcome bigint,
                outcome_value bigint
            )
            """,
            "CREATE INDEX resend_records_key ON resend_records (key_hash, id)",
            "CREATE INDEX resend_records_expiry ON resend_records (expires_at)",
            "INSERT INTO apns_bridge_schema (version) VALUES (1)",
        ]
        for statement in statements {
            try await connection.query(statement, logger: logger)
        }
        logger.info("store schema created", metadata: ["backend": "postgresql", "version": "1"])
    }

    /// Two instances committing overlapping batches can deadlock; PostgreSQL then aborts one,
    /// which is retried.
    static func retryingConflicts<Result>(logger: Logger, _ body: () async throws -> Result) async throws -> Result {
        var attempt = 1
        while true {
            do {
                return try await body()
            } catch let error as PSQLError
                where attempt < 5 && ["40P01", "40001"].contains(error.serverInfo?[.sqlState] ?? "")
            {
                logger.debug("store transaction conflict; retrying", metadata: ["attempt": "\(attempt)"])
                attempt += 1
                try await Task.sleep(for: .milliseconds(10 * attempt))
            }
        }
    }

    // MARK: Feedback: recording

    package func apply(_ change: FeedbackChange, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        self.batcher.submit(change, on: eventLoop)
    }

    private static func write(
        _ batch: FeedbackWriteBatcher.Batch,
        on connection: PostgresConnection,
        now: Int64,
        logger: Logger
    ) async throws {
        var entries = batch.entries
        var removals = batch.removals
        // One order for every instance's row locks: fewer deadlocks between them.
        entries.sort { Self.precedes($0.key, $1.key) }
        removals.sort(by: Self.precedes)
        if !entries.isEmpty {
            let tenants = entries.map(\.tenant)
            let environments = entries.map(\.environment.rawValue)
            let tokens = entries.map(\.deviceToken)
            let timestamps = entries.map { Int64($0.timestamp) }
            try await connection.query(
                """
                INSERT INTO feedback_entries (tenant, environment, token, timestamp, recorded_at)
                SELECT t.tenant, t.environment, t.token, t.timestamp, \(now)
                FROM unnest(\(tenants)::text[], \(environments)::text[], \(tokens)::bytea[], \(timestamps)::bigint[])
                    AS t(tenant, environment, token, timestamp)
                ON CONFLICT (tenant, environment, token) DO UPDATE SET
                    timestamp = EXCLUDED.timestamp, recorded_at = EXCLUDED.recorded_at,
                    claim = NULL, claim_batch = NULL, claimed_at = NULL
                WHERE feedback_entries.timestamp < EXCLUDED.timestamp
                """,
                logger: logger
            )
            // Delivered when this transaction commits, to every instance listening (this one too).
            for payload in FeedbackListNotifications.payloads(for: entries) {
                try await connection.query(
                    "SELECT pg_notify(\(FeedbackListNotifications.channel), \(payload))",
                    logger: logger
                )
            }
        }
        if !removals.isEmpty {
            let tenants = removals.map(\.tenant)
            let environments = removals.map(\.environment.rawValue)
            let tokens = removals.map(\.deviceToken)
            try await connection.query(
                """
                DELETE FROM feedback_entries f
                USING unnest(\(tenants)::text[], \(environments)::text[], \(tokens)::bytea[]) AS r(tenant, environment, token)
                WHERE f.tenant = r.tenant AND f.environment = r.environment AND f.token = r.token
                """,
                logger: logger
            )
        }
    }

    private static func precedes(_ lhs: FeedbackKey, _ rhs: FeedbackKey) -> Bool {
        if lhs.tenant != rhs.tenant { return lhs.tenant < rhs.tenant }
        if lhs.environment != rhs.environment { return lhs.environment.rawValue < rhs.environment.rawValue }
        return lhs.deviceToken.readableBytesView.lexicographicallyPrecedes(rhs.deviceToken.readableBytesView)
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
        let lengthFilter = options.only32ByteTokens ? "AND octet_length(token) = 32" : ""
        return try await FeedbackDrainLoop.run(
            batchSize: options.batchSize,
            health: self.health,
            retryWhile: { self.isOpen },
            outageBudget: self.configuration.outageBudget,
            pollerConnected: pollerConnected,
            deliver: deliver,
            finish: finish,
            claim: { batch, deleting, retaking in
                // Delivered batches go in the same statement (one transaction) as the next claim; the
                // rows it deletes are claimed ones, the rows the claim takes unclaimed ones. (The
                // release below leaves the deleted batches' rows to the DELETE: a row two parts of one
                // statement change ends up with either change.)
                try await Self.withConnection(
                    self.client,
                    timeout: self.configuration.statementTimeout,
                    beforeStatement: { if !pollerConnected() { throw FeedbackDrainLoop.PollerGone() } }
                ) { connection in
                    var claimed: [(id: Int64, tuple: FeedbackTuple)] = []
                    let rows = try await connection.query(
                        """
                        WITH delivered AS (
                            DELETE FROM feedback_entries
                            WHERE claim = \(claim) AND claim_batch BETWEEN \(Int32(deleting?.lowerBound ?? 0)) AND \(Int32(deleting?.upperBound ?? 0))
                        )
                        UPDATE feedback_entries SET claim = \(claim), claim_batch = \(Int32(batch)), claimed_at = \(self.configuration.nowSeconds)
                        WHERE id IN (
                            SELECT id FROM feedback_entries
                            WHERE tenant = \(tenant) AND environment = \(environment.rawValue) \(unescaped: lengthFilter)
                            AND (claim IS NULL OR (\(retaking) AND claim = \(claim)
                                AND claim_batch NOT BETWEEN \(Int32(deleting?.lowerBound ?? 0)) AND \(Int32(deleting?.upperBound ?? 0))))
                            ORDER BY id LIMIT \(Int64(options.batchSize))
                            FOR UPDATE SKIP LOCKED
                        )
                        RETURNING id, token, timestamp
                        """,
                        logger: self.logger
                    )
                    for try await (id, token, timestamp) in rows.decode((Int64, ByteBuffer, Int64).self) {
                        claimed.append((id, FeedbackTuple(timestamp: UInt32(clamping: timestamp), deviceToken: token)))
                    }
                    return claimed.sorted { $0.id < $1.id }.map(\.tuple)
                }
            },
            release: { deleting in
                try await self.run(
                    """
                    WITH delivered AS (
                        DELETE FROM feedback_entries
                        WHERE claim = \(claim) AND claim_batch BETWEEN \(Int32(deleting?.lowerBound ?? 0)) AND \(Int32(deleting?.upperBound ?? 0))
                    )
                    UPDATE feedback_entries SET claim = NULL, claim_batch = NULL, claimed_at = NULL
                    WHERE claim = \(claim) AND claim_batch NOT BETWEEN \(Int32(deleting?.lowerBound ?? 0)) AND \(Int32(deleting?.upperBound ?? 0))
                    """
                ) { _ in }
            }
        )
    }

    package func pendingEntries(
        tenant: String,
        environment: APNsEnvironment,
        limit: Int
    ) async throws -> [FeedbackEntry] {
        try await self.run(
            """
            SELECT token, timestamp FROM feedback_entries
            WHERE tenant = \(tenant) AND environment = \(environment.rawValue) AND claim IS NULL
            ORDER BY id LIMIT \(Int64(limit))
            """
        ) { rows in
            var entries: [FeedbackEntry] = []
            for try await (token, timestamp) in rows.decode((ByteBuffer, Int64).self) {
                entries.append(
                    FeedbackEntry(
                        tenant: tenant,
                        environment: environment,
                        deviceToken: token,
                        timestamp: UInt32(clamping: timestamp)
                    )
                )
            }
            return entries
        }
    }

    package func pendingCount() async throws -> Int {
        try await self.run("SELECT count(*) FROM feedback_entries") { rows in
            var count: Int64 = 0
            for try await found in rows.decode(Int64.self) { count = found }
            return Int(count)
        }
    }

    // MARK: Resend records

    package func mayHoldLiveRecords(tenant: String) -> Bool {
        self.horizons.mayHoldLiveRecords(tenant: tenant) { self.configuration.nowMilliseconds }
    }

    /// One query: the latest expiry of the tenant's unclaimed records, whichever instance wrote
    /// them. If the database cannot answer, or is known not to answer (an outage the heartbeat
    /// or a write found: the query would wait until postgres-nio gives up connecting, about
    /// 15 s), the tenant is treated as holding records for a window: each of its notifications
    /// is looked up, within the outage budget, rather than a resend forwarded twice.
    package func refreshLiveRecords(tenant: String, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        eventLoop.makeFutureWithTask {
            let now = self.configuration.nowMilliseconds
            if self.health.currentOutage != nil {
                self.horizons.extend(tenant: tenant, until: now + self.configuration.resendRecordWindow.milliseconds)
                return
            }
            do {
                let latest = try await self.run(
                    "SELECT max(expires_at) FROM resend_records WHERE tenant = \(tenant) AND NOT claimed AND expires_at >= \(now)"
                ) { rows in
                    var latest: Int64?
                    for try await until in rows.decode(Int64?.self) { latest = until }
                    return latest
                }
                if let latest { self.horizons.extend(tenant: tenant, until: latest) }
            } catch {
                self.logger.warning(
                    "could not read the tenant's resend records; its notifications will be looked up",
                    metadata: ["tenant": "\(tenant)", "error": "\(String(reflecting: error))"]
                )
                self.horizons.extend(tenant: tenant, until: now + self.configuration.resendRecordWindow.milliseconds)
            }
        }
    }

    package func remember(_ records: [ResendRecord], on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        let expiresAt = self.configuration.nowMilliseconds + self.configuration.resendRecordWindow.milliseconds
        for tenant in Set(records.map(\.key.tenant)) {
            self.horizons.extend(tenant: tenant, until: expiresAt)
        }
        let hashes = records.map(\.key.storageHash)
        let tenants = records.map(\.key.tenant)
        let encoded = records.map { $0.outcome.map(StoredOutcome.encode) ?? (kind: -1, value: 0) }
        let kinds = encoded.map(\.kind)
        let values = encoded.map(\.value)
        // Empty for a record without an id (an array of bytea cannot hold NULL here): stored NULL.
        let ids = records.map { $0.notificationID?.stored ?? ByteBuffer() }
        let deadline = ContinuousClock.now + self.configuration.outageBudget
        return eventLoop.makeFutureWithTask {
            // The packet waits for these: within the outage budget, a store that is briefly gone
            // is waited for rather than the resends duplicated.
            try await self.health.retrying("resend records", while: { self.isOpen && .now < deadline }) {
                try await self.run(
                    """
                    INSERT INTO resend_records (key_hash, tenant, expires_at, outcome, outcome_value, owner, notification_id)
                    SELECT r.key_hash, r.tenant, \(expiresAt), NULLIF(r.kind, -1), r.value, \(self.instanceID),
                        NULLIF(r.notification_id, ''::bytea)
                    FROM unnest(
                        \(hashes)::bytea[], \(tenants)::text[], \(kinds)::bigint[], \(values)::bigint[], \(ids)::bytea[]
                    ) WITH ORDINALITY AS r(key_hash, tenant, kind, value, notification_id, position)
                    ORDER BY r.position
                    """
                ) { _ in }
            }
        }
    }

    private var isOpen: Bool {
        !self.isClosed.withLock { $0 }
    }

    package func resolve(
        _ key: ResendRecordKey,
        outcome: NotificationOutcome,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<Void> {
        guard self.mayHoldLiveRecords(tenant: key.tenant) else { return eventLoop.makeSucceededVoidFuture() }
        let (kind, value) = StoredOutcome.encode(outcome)
        let hash = key.storageHash
        // No record outlives the window: an outcome not written by then is no longer needed.
        let deadline = ContinuousClock.now + self.configuration.resendRecordWindow
        return eventLoop.makeFutureWithTask {
            // Only this instance's records: the outcome is of a notification it forwarded.
            // FOR UPDATE, not SKIP LOCKED: a claim on another instance may hold the row for a
            // moment; skipping it would lose the outcome that claim is waiting for. A claim
            // waits for this outcome while this instance lives: it is written when the store
            // answers again, never dropped (docs/operations.md#store-outage).
            let updated = try await self.health.retrying("resend outcome", while: { self.isOpen && .now < deadline }) {
                try await self.run(
                    """
                    UPDATE resend_records SET outcome = \(kind), outcome_value = \(value)
                    WHERE id = (
                        SELECT id FROM resend_records WHERE key_hash = \(hash) AND outcome IS NULL AND owner = \(self.instanceID)
                        ORDER BY id LIMIT 1 FOR UPDATE
                    )
                    RETURNING id
                    """
                ) { rows in
                    var ids: [Int64] = []
                    for try await id in rows.decode(Int64.self) { ids.append(id) }
                    return ids
                }
            }
            for id in updated { self.outcomeWaiters.wake(id) }
        }
    }

    package func claim(_ key: ResendRecordKey, on eventLoop: any EventLoop) -> EventLoopFuture<ResendClaim> {
        guard self.mayHoldLiveRecords(tenant: key.tenant) else { return eventLoop.makeSucceededFuture(.new) }
        let hash = key.storageHash
        let deadline = ContinuousClock.now + self.configuration.outageBudget
        let madeBefore = self.configuration.nowMilliseconds + self.configuration.resendRecordWindow.milliseconds
        return eventLoop.makeFutureWithTask {
            // A store that is briefly gone is waited for, within the outage budget: a lookup
            // that failed at once would fail a notification APNs would have accepted.
            let claimed = try await self.health.retrying(
                "resend lookup",
                isWrite: false,
                while: { self.isOpen && .now < deadline }
            ) {
                try await self.takeRecord(hash, ownRecordsExpiringBefore: madeBefore)
            }
            guard var record = claimed else { return .new }
            // The outcome of the first send may still be on its way, possibly on another
            // instance: wait for it while its owner is alive (its heartbeat renewed within the
            // lease), at most until the record expires. An owner that is gone sends no outcome.
            // This instance's own outcomes wake the wait; another's are seen at the next check.
            var checks = 0
            while record.kind == nil {
                if self.configuration.nowMilliseconds > record.expiresAt {
                    return .outcomeUnknown(firstSentAs: record.firstSentAs)
                }
                await self.outcomeWaiters.waitBeforeCheck(
                    of: record.id,
                    checks: &checks,
                    limit: self.configuration.resendOutcomeCheckInterval
                )
                let checked = try await self.health.retrying(
                    "resend outcome check",
                    isWrite: false,
                    while: { self.isOpen && self.configuration.nowMilliseconds <= record.expiresAt }
                ) {
                    try await self.checkOutcome(of: record.id)
                }
                guard let checked else { return .outcomeUnknown(firstSentAs: record.firstSentAs) }
                (record.kind, record.value) = (checked.kind, checked.value)
                if record.kind == nil && !checked.ownerAlive { return .outcomeUnknown(firstSentAs: record.firstSentAs) }
            }
            return StoredOutcome.claim(
                kind: record.kind ?? StoredOutcome.unknown,
                value: record.value ?? 0,
                firstSentAs: record.firstSentAs
            )
        }
    }

    /// Claims the oldest live record with this key hash, if there is one.
    private struct ClaimedRecord: Sendable {
        var id: Int64
        var expiresAt: Int64
        var kind: Int64?
        var value: Int64?
        var firstSentAs: ForwardedNotification.ID?
    }

    private struct CheckedOutcome: Sendable {
        var kind: Int64?
        var value: Int64?
        var ownerAlive: Bool
    }

    /// Claims the oldest live record with this key hash, if there is one.
    ///
    /// Not a record of this instance's that expires at or after `ownRecordsExpiringBefore`,
    /// that is, one made after the claim began: a notification whose lookup is slow (the
    /// store just came back) can be in its own connection's farewell, and taking that record
    /// would wait for its own outcome until the record expired. A real resend's record is
    /// always older than the resend: the error-response is written after it is stored.
    /// Another instance's records are compared with nothing from this clock.
    private func takeRecord(
        _ hash: ByteBuffer,
        ownRecordsExpiringBefore madeBefore: Int64
    ) async throws -> ClaimedRecord? {
        let now = self.configuration.nowMilliseconds
        // FOR UPDATE, not SKIP LOCKED: a row locked by a resolve is still this claim's to
        // take. When a concurrent claim takes the row first, the statement finds nothing
        // (PostgreSQL re-checks the row after the wait): then it runs again for the next
        // identical record, if there is one.
        for _ in 0..<8 {
            let taken = try await self.run(
                """
                UPDATE resend_records SET claimed = true
                WHERE id = (
                    SELECT id FROM resend_records
                    WHERE key_hash = \(hash) AND NOT claimed AND expires_at >= \(now)
                        AND (owner <> \(self.instanceID) OR expires_at < \(madeBefore))
                    ORDER BY id LIMIT 1 FOR UPDATE
                )
                RETURNING id, expires_at, outcome, outcome_value, notification_id
                """
            ) { rows -> ClaimedRecord? in
                for try await row in rows.decode((Int64, Int64, Int64?, Int64?, ByteBuffer?).self) {
                    return ClaimedRecord(
                        id: row.0,
                        expiresAt: row.1,
                        kind: row.2,
                        value: row.3,
                        firstSentAs: row.4.flatMap(ForwardedNotification.ID.init(stored:))
                    )
                }
                return nil
            }
            if let taken { return taken }
            let remaining = try await self.run(
                """
                SELECT count(*) FROM resend_records
                WHERE key_hash = \(hash) AND NOT claimed AND expires_at >= \(now)
                    AND (owner <> \(self.instanceID) OR expires_at < \(madeBefore))
                """
            ) { rows in
                var remaining: Int64 = 0
                for try await found in rows.decode(Int64.self) { remaining = found }
                return remaining
            }
            if remaining == 0 { return nil }
        }
        return nil
    }

    /// A claimed record's outcome so far, and whether its owner is alive; `nil` if it is gone.
    private func checkOutcome(of id: Int64) async throws -> CheckedOutcome? {
        let lease = Double(self.configuration.instanceLease.milliseconds) / 1000
        return try await self.run(
            """
            SELECT r.outcome, r.outcome_value, EXISTS (
                SELECT 1 FROM bridge_instances i
                WHERE i.id = r.owner AND i.heartbeat_at >= now() - make_interval(secs => \(lease))
            )
            FROM resend_records r WHERE r.id = \(id)
            """
        ) { rows -> CheckedOutcome? in
            for try await (kind, value, alive) in rows.decode((Int64?, Int64?, Bool).self) {
                return CheckedOutcome(kind: kind, value: value, ownerAlive: alive)
            }
            return nil
        }
    }

    // MARK: Maintenance

    package func removeExpired() async throws -> StoreSweep {
        let nowSeconds = self.configuration.nowSeconds
        let nowMilliseconds = self.configuration.nowMilliseconds
        let retentionStart = nowSeconds - self.configuration.feedbackRetention.milliseconds / 1000
        let leaseStart = nowSeconds - self.configuration.claimLease.milliseconds / 1000
        func count(_ query: PostgresQuery) async throws -> Int {
            try await self.run(query) { rows in
                var n = 0
                for try await _ in rows { n += 1 }
                return n
            }
        }
        let entries = try await count(
            "DELETE FROM feedback_entries WHERE recorded_at < \(retentionStart) AND claim IS NULL RETURNING id"
        )
        let records = try await count(
            "DELETE FROM resend_records WHERE expires_at < \(nowMilliseconds) OR (claimed AND outcome IS NOT NULL) RETURNING id"
        )
        let claims = try await count(
            "UPDATE feedback_entries SET claim = NULL, claim_batch = NULL, claimed_at = NULL WHERE claimed_at < \(leaseStart) RETURNING id"
        )
        // Instances that crashed: gone for longer than a record lives, so no record names them.
        let gone =
            Double((self.configuration.instanceLease + self.configuration.resendRecordWindow).milliseconds) / 1000
        _ = try await count(
            "DELETE FROM bridge_instances WHERE heartbeat_at < now() - make_interval(secs => \(gone)) RETURNING id"
        )
        let usage = try await Self.withConnection(self.client, timeout: self.configuration.statementTimeout) {
            [logger] connection in
            try await PostgresUsage.removeExpired(
                before: UsageDay(unixSeconds: nowSeconds - self.configuration.usageRetention.milliseconds / 1000),
                on: connection,
                logger: logger
            )
        }
        let failures = try await Self.withConnection(self.client, timeout: self.configuration.statementTimeout) {
            [logger] connection in
            try await PostgresPushFailures.removeExpired(
                before: nowMilliseconds - self.configuration.usageRetention.milliseconds,
                on: connection,
                logger: logger
            )
        }
        // Entries served, removed or expired since the last sweep leave the filter.
        try await Self.rebuild(
            self.feedbackListFilter,
            client: self.client,
            timeout: self.configuration.statementTimeout,
            logger: self.logger
        )
        return StoreSweep(
            feedbackEntries: entries,
            resendRecords: records,
            releasedClaims: claims,
            usageRows: usage,
            pushFailures: failures
        )
    }
}

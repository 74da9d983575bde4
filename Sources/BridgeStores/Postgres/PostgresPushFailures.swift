import BridgeCore
import LegacyProtocol
import Logging
import NIOCore
import PostgresNIO

/// The push log's failures in the PostgreSQL store (schema 5) and their statements, shared by
/// the store and by ``PostgresStoreReader`` (`apns-bridge log --store`): one row per
/// notification APNs did not accept, kept for `usage.retentionDays` (docs/feedback.md#tables).
/// Every instance writes its own failures to the same table, so a lookup sees them all.
enum PostgresPushFailures {
    static let schema: [PostgresQuery] = [
        """
        CREATE TABLE push_failures (
            run bigint NOT NULL, sequence bigint NOT NULL, received_ms bigint NOT NULL,
            tenant text NOT NULL, environment text NOT NULL, command integer NOT NULL, identifier bigint NOT NULL,
            token_prefix bigint NOT NULL, token_length integer NOT NULL, token_hash bigint NOT NULL, token bytea,
            channel text, apns_id bytea NOT NULL, apns_unique_id text, status integer NOT NULL, reason text,
            failure text, attempts integer NOT NULL, microseconds bigint NOT NULL, outcome text NOT NULL,
            outcome_value bigint NOT NULL, resend_matched boolean NOT NULL,
            PRIMARY KEY (run, sequence)
        )
        """,
        "CREATE INDEX push_failures_received ON push_failures (received_ms)",
        "CREATE INDEX push_failures_token ON push_failures (token_hash)",
    ]

    /// Adds `failures` in one statement (a column to an array); a row already there stays as it
    /// is. An absent text or token goes as an empty array element, stored as NULL (so an empty
    /// text reads back absent).
    static func write(_ failures: [StoredPushFailure], on connection: PostgresConnection, logger: Logger) async throws {
        let entries = failures.map(\.entry)
        let runs = failures.map { Int64(bitPattern: $0.run) }
        let sequences = entries.map { Int64(clamping: $0.sequence) }
        let received = failures.map { Int64(clamping: $0.receivedMilliseconds) }
        let tenants = entries.map(\.tenant)
        let environments = entries.map(\.environment.rawValue)
        let commands = entries.map { Int32($0.command.rawValue) }
        let identifiers = entries.map { Int64($0.identifier.rawValue) }
        let prefixes = entries.map { Int64($0.token.prefix) }
        let lengths = entries.map { Int32($0.token.length) }
        let hashes = entries.map { Int64(bitPattern: $0.token.hash) }
        let tokens = entries.map { $0.tokenBytes.map { ByteBuffer(bytes: $0) } ?? ByteBuffer() }
        let channels = entries.map { $0.channel ?? "" }
        let ids = entries.map(\.apnsID.stored)
        let uniqueIDs = entries.map { $0.uniqueID ?? "" }
        let statuses = entries.map { Int32($0.status) }
        let reasons = entries.map { $0.reason ?? "" }
        let failureTexts = entries.map { $0.failure ?? "" }
        let attempts = entries.map { Int32($0.attempts) }
        let microseconds = entries.map { Int64($0.microseconds) }
        let outcomes = entries.map(\.outcomeName)
        let outcomeValues = failures.map(\.outcomeValue)
        let resendMatched = entries.map(\.resendMatched)
        try await connection.query(
            """
            INSERT INTO push_failures (\(unescaped: StoredPushFailure.columns))
            SELECT r.run, r.sequence, r.received_ms, r.tenant, r.environment, r.command, r.identifier, r.token_prefix,
                r.token_length, r.token_hash, NULLIF(r.token, ''::bytea), NULLIF(r.channel, ''), r.apns_id,
                NULLIF(r.apns_unique_id, ''), r.status, NULLIF(r.reason, ''), NULLIF(r.failure, ''), r.attempts,
                r.microseconds, r.outcome, r.outcome_value, r.resend_matched
            FROM unnest(\(runs)::bigint[], \(sequences)::bigint[], \(received)::bigint[], \(tenants)::text[],
                \(environments)::text[], \(commands)::integer[], \(identifiers)::bigint[], \(prefixes)::bigint[],
                \(lengths)::integer[], \(hashes)::bigint[], \(tokens)::bytea[], \(channels)::text[], \(ids)::bytea[],
                \(uniqueIDs)::text[], \(statuses)::integer[], \(reasons)::text[], \(failureTexts)::text[],
                \(attempts)::integer[], \(microseconds)::bigint[], \(outcomes)::text[], \(outcomeValues)::bigint[],
                \(resendMatched)::boolean[])
            AS r(run, sequence, received_ms, tenant, environment, command, identifier, token_prefix, token_length,
                token_hash, token, channel, apns_id, apns_unique_id, status, reason, failure,
                attempts, microseconds, outcome, outcome_value, resend_matched)
            ON CONFLICT DO NOTHING
            """,
            logger: logger
        )
    }

    static func read(
        matching query: PushLogQuery,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws -> [StoredPushFailure] {
        // Every filter is bound; one left out is NULL and passes.
        let hash = query.tokenHash.map { Int64(bitPattern: $0) }
        let prefix = query.storedTokenPrefix
        let identifier = query.identifier.map { Int64($0.rawValue) }
        let status = query.status.map { Int32($0) }
        let rows = try await connection.query(
            """
            SELECT \(unescaped: StoredPushFailure.columns) FROM push_failures
            WHERE (\(query.tenant)::text IS NULL OR tenant = \(query.tenant))
                AND (\(hash)::bigint IS NULL OR token_hash = \(hash))
                AND (\(prefix?.value)::bigint IS NULL
                    OR (token_prefix >> \(Int32(prefix?.shift ?? 0)) = \(prefix?.value)
                        AND token_length >= \(Int32(prefix?.count ?? 0))))
                AND (\(identifier)::bigint IS NULL OR identifier = \(identifier))
                AND (\(query.apnsID?.stored)::bytea IS NULL OR apns_id = \(query.apnsID?.stored))
                AND (\(status)::integer IS NULL OR status = \(status))
                AND received_ms >= \(Int64(clamping: query.since ?? 0))
            ORDER BY received_ms DESC, sequence DESC LIMIT \(query.storedLimit)
            """,
            logger: logger
        )
        var found: [StoredPushFailure] = []
        for try await row in rows {
            let cells = row.makeRandomAccess()
            func cell<Value: PostgresDecodable>(_ name: String, _ type: Value.Type = Value.self) throws -> Value {
                try cells[name].decode(Value.self)
            }
            let failure = StoredPushFailure(
                run: try cell("run"),
                sequence: try cell("sequence"),
                receivedMilliseconds: try cell("received_ms"),
                tenant: try cell("tenant"),
                environment: try cell("environment"),
                command: Int64(try cell("command", Int32.self)),
                identifier: try cell("identifier"),
                tokenPrefix: try cell("token_prefix"),
                tokenLength: Int64(try cell("token_length", Int32.self)),
                tokenHash: try cell("token_hash"),
                token: try cell("token"),
                channel: try cell("channel"),
                apnsID: try cell("apns_id"),
                uniqueID: try cell("apns_unique_id"),
                status: Int64(try cell("status", Int32.self)),
                reason: try cell("reason"),
                failure: try cell("failure"),
                attempts: Int64(try cell("attempts", Int32.self)),
                microseconds: try cell("microseconds"),
                outcome: try cell("outcome"),
                outcomeValue: try cell("outcome_value"),
                resendMatched: try cell("resend_matched")
            )
            if let failure { found.append(failure) }
        }
        return found
    }

    /// Removes the failures received before `cutoff` (milliseconds since 1970).
    static func removeExpired(
        before cutoff: Int64,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws
        -> Int
    {
        var removed = 0
        for try await _ in try await connection.query(
            "DELETE FROM push_failures WHERE received_ms < \(cutoff) RETURNING sequence",
            logger: logger
        ) {
            removed += 1
        }
        return removed
    }
}

extension PostgresBridgeStore {
    package func recordPushFailures(_ failures: [StoredPushFailure]) async throws {
        guard !failures.isEmpty else { return }
        try await Self.withConnection(self.client, timeout: self.configuration.statementTimeout) { connection in
            try await PostgresPushFailures.write(failures, on: connection, logger: self.logger)
        }
    }

    package func pushFailures(matching query: PushLogQuery) async throws -> [StoredPushFailure] {
        try await Self.withConnection(self.client, timeout: self.configuration.statementTimeout) { connection in
            try await PostgresPushFailures.read(matching: query, on: connection, logger: self.logger)
        }
    }
}

import BridgeCore
import LegacyProtocol
import NIOCore
import SQLiteNIO

/// The push log's failures in the SQLite store (schema 4) and their statements, shared by the
/// store and by ``SQLiteStoreReader`` (`apns-bridge log --store`): one row per notification APNs
/// did not accept, kept for `usage.retentionDays` (docs/feedback.md#tables).
enum SQLitePushFailures {
    static let schema = [
        """
        CREATE TABLE push_failures (
            run INTEGER NOT NULL, sequence INTEGER NOT NULL, received_ms INTEGER NOT NULL,
            tenant TEXT NOT NULL, environment TEXT NOT NULL, command INTEGER NOT NULL, identifier INTEGER NOT NULL,
            token_prefix INTEGER NOT NULL, token_length INTEGER NOT NULL, token_hash INTEGER NOT NULL, token BLOB,
            channel TEXT, apns_id BLOB NOT NULL, apns_unique_id TEXT, status INTEGER NOT NULL, reason TEXT,
            failure TEXT, attempts INTEGER NOT NULL, microseconds INTEGER NOT NULL, outcome TEXT NOT NULL,
            outcome_value INTEGER NOT NULL, resend_matched INTEGER NOT NULL,
            PRIMARY KEY (run, sequence)
        ) WITHOUT ROWID
        """,
        "CREATE INDEX push_failures_received ON push_failures (received_ms)",
        "CREATE INDEX push_failures_token ON push_failures (token_hash)",
    ]

    /// Rows to a statement: 22 columns each, within SQLite's bound on parameters.
    static let rowsPerStatement = 200

    /// Adds `failures` (in the caller's transaction); a row already there stays as it is.
    static func write(_ failures: [StoredPushFailure], to connection: SQLiteConnection) async throws {
        let row = "(" + Array(repeating: "?", count: StoredPushFailure.columnCount).joined(separator: ", ") + ")"
        var start = 0
        while start < failures.count {
            let chunk = failures[start..<min(start + Self.rowsPerStatement, failures.count)]
            start = chunk.endIndex
            _ = try await connection.query(
                """
                INSERT INTO push_failures (\(StoredPushFailure.columns))
                VALUES \(Array(repeating: row, count: chunk.count).joined(separator: ", ")) ON CONFLICT DO NOTHING
                """,
                chunk.flatMap(Self.values)
            )
        }
    }

    private static func values(_ failure: StoredPushFailure) -> [SQLiteData] {
        let entry = failure.entry
        func text(_ value: String?) -> SQLiteData { value.map { .text($0) } ?? .null }
        return [
            .integer(Int(Int64(bitPattern: failure.run))), .integer(Int(clamping: entry.sequence)),
            .integer(Int(clamping: failure.receivedMilliseconds)), .text(entry.tenant),
            .text(entry.environment.rawValue), .integer(Int(entry.command.rawValue)),
            .integer(Int(entry.identifier.rawValue)), .integer(Int(entry.token.prefix)),
            .integer(Int(entry.token.length)), .integer(Int(Int64(bitPattern: entry.token.hash))),
            entry.tokenBytes.map { .blob(ByteBuffer(bytes: $0)) } ?? .null, text(entry.channel),
            .blob(entry.apnsID.stored), text(entry.uniqueID), .integer(Int(entry.status)), text(entry.reason),
            text(entry.failure), .integer(Int(entry.attempts)), .integer(Int(entry.microseconds)),
            .text(entry.outcomeName), .integer(Int(failure.outcomeValue)), .integer(entry.resendMatched ? 1 : 0),
        ]
    }

    static func read(
        matching query: PushLogQuery,
        connection: SQLiteConnection,
        corrupt: CorruptValues
    ) async throws -> [StoredPushFailure] {
        var conditions: [String] = []
        var bindings: [SQLiteData] = []
        func add(_ condition: String, _ values: SQLiteData...) {
            conditions.append(condition)
            bindings += values
        }
        if let tenant = query.tenant { add("tenant = ?", .text(tenant)) }
        if let hash = query.tokenHash { add("token_hash = ?", .integer(Int(Int64(bitPattern: hash)))) }
        if let prefix = query.storedTokenPrefix {
            add(
                "token_prefix >> ? = ? AND token_length >= ?",
                .integer(Int(prefix.shift)),
                .integer(Int(prefix.value)),
                .integer(Int(prefix.count))
            )
        }
        if let identifier = query.identifier { add("identifier = ?", .integer(Int(identifier.rawValue))) }
        if let apnsID = query.apnsID { add("apns_id = ?", .blob(apnsID.stored)) }
        if let status = query.status { add("status = ?", .integer(Int(status))) }
        if let since = query.since { add("received_ms >= ?", .integer(Int(clamping: since))) }
        let filter = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
        let rows = try await connection.query(
            """
            SELECT \(StoredPushFailure.columns) FROM push_failures\(filter)
            ORDER BY received_ms DESC, sequence DESC LIMIT ?
            """,
            bindings + [.integer(Int(query.storedLimit))]
        )
        return rows.compactMap { row in
            func integer(_ column: String) -> Int64? { row.storedInteger(column, corrupt: corrupt).map(Int64.init) }
            guard let run = integer("run"), let sequence = integer("sequence"), let received = integer("received_ms"),
                let tenant = row.column("tenant")?.string, let environment = row.column("environment")?.string,
                let command = integer("command"), let identifier = integer("identifier"),
                let prefix = integer("token_prefix"), let length = integer("token_length"),
                let hash = integer("token_hash"), let apnsID = row.column("apns_id")?.blob,
                let status = integer("status"), let attempts = integer("attempts"),
                let microseconds = integer("microseconds"), let outcome = row.column("outcome")?.string,
                let outcomeValue = integer("outcome_value"), let resendMatched = integer("resend_matched")
            else { return nil }
            return StoredPushFailure(
                run: run,
                sequence: sequence,
                receivedMilliseconds: received,
                tenant: tenant,
                environment: environment,
                command: command,
                identifier: identifier,
                tokenPrefix: prefix,
                tokenLength: length,
                tokenHash: hash,
                token: row.column("token")?.blob,
                channel: row.column("channel")?.string,
                apnsID: apnsID,
                uniqueID: row.column("apns_unique_id")?.string,
                status: status,
                reason: row.column("reason")?.string,
                failure: row.column("failure")?.string,
                attempts: attempts,
                microseconds: microseconds,
                outcome: outcome,
                outcomeValue: outcomeValue,
                resendMatched: resendMatched != 0
            )
        }
    }

    /// Removes the failures received before `cutoff` (milliseconds since 1970).
    static func removeExpired(before cutoff: Int64, connection: SQLiteConnection) async throws -> Int {
        try await connection.query(
            "DELETE FROM push_failures WHERE received_ms < ? RETURNING sequence",
            [.integer(Int(cutoff))]
        ).count
    }
}

extension SQLiteBridgeStore {
    package func recordPushFailures(_ failures: [StoredPushFailure]) async throws {
        guard !failures.isEmpty else { return }
        try await self.lock.withLock {
            try await Self.transaction(self.connection) {
                try await SQLitePushFailures.write(failures, to: self.connection)
            }
        }
    }

    package func pushFailures(matching query: PushLogQuery) async throws -> [StoredPushFailure] {
        try await self.lock.withLock {
            try await SQLitePushFailures.read(
                matching: query,
                connection: self.connection,
                corrupt: self.health.corruptValues
            )
        }
    }
}

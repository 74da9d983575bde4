import BridgeCore
import Foundation
import Logging
import PostgresNIO

/// The usage tables of the PostgreSQL store (schema 3) and their statements, shared by the
/// store and by ``PostgresStoreReader``. Every instance adds its batches to the same rows, so
/// the figures are the sum over the instances.
enum PostgresUsage {
    static let schema: [PostgresQuery] = [
        """
        CREATE TABLE usage_counts (
            tenant text NOT NULL, day integer NOT NULL, counter text NOT NULL, value bigint NOT NULL,
            PRIMARY KEY (tenant, day, counter)
        )
        """,
        """
        CREATE TABLE usage_addresses (
            tenant text NOT NULL, day integer NOT NULL, address text NOT NULL,
            PRIMARY KEY (tenant, day, address)
        )
        """,
        "CREATE TABLE usage_tenants (tenant text PRIMARY KEY, first_seen bigint, last_seen bigint, last_poll bigint)",
        """
        CREATE TABLE usage_certificates (
            tenant text NOT NULL, fingerprint text NOT NULL, subject text NOT NULL, not_after bigint NOT NULL,
            first_seen bigint NOT NULL, last_seen bigint NOT NULL,
            PRIMARY KEY (tenant, fingerprint)
        )
        """,
    ]

    /// Adds a batch in one transaction. Rows are written in one order on every instance, so two
    /// instances' batches do not deadlock on each other.
    static func write(_ batch: UsageBatch, on connection: PostgresConnection, logger: Logger) async throws {
        let counts = batch.counts.sorted {
            ($0.key.tenant, $0.key.day.number, $0.key.counter) < ($1.key.tenant, $1.key.day.number, $1.key.counter)
        }
        if !counts.isEmpty {
            let tenants = counts.map(\.key.tenant)
            let days = counts.map { Int32($0.key.day.number) }
            let counters = counts.map(\.key.counter)
            let values = counts.map(\.value)
            try await connection.query(
                """
                INSERT INTO usage_counts (tenant, day, counter, value)
                SELECT * FROM unnest(\(tenants)::text[], \(days)::integer[], \(counters)::text[], \(values)::bigint[])
                ON CONFLICT (tenant, day, counter) DO UPDATE SET value =
                    CASE WHEN usage_counts.value > 9223372036854775807 - EXCLUDED.value THEN 9223372036854775807
                    ELSE usage_counts.value + EXCLUDED.value END
                """,
                logger: logger
            )
        }
        let addresses = batch.addresses.sorted {
            ($0.tenant, $0.day.number, $0.address) < ($1.tenant, $1.day.number, $1.address)
        }
        if !addresses.isEmpty {
            let tenants = addresses.map(\.tenant)
            let days = addresses.map { Int32($0.day.number) }
            let values = addresses.map(\.address)
            try await connection.query(
                """
                INSERT INTO usage_addresses (tenant, day, address)
                SELECT * FROM unnest(\(tenants)::text[], \(days)::integer[], \(values)::text[])
                ON CONFLICT DO NOTHING
                """,
                logger: logger
            )
        }
        for (tenant, times) in batch.tenants.sorted(by: { $0.key < $1.key }) {
            // LEAST and GREATEST skip NULLs.
            try await connection.query(
                """
                INSERT INTO usage_tenants (tenant, first_seen, last_seen, last_poll)
                VALUES (\(tenant), \(times.firstSeen), \(times.lastSeen), \(times.lastPoll))
                ON CONFLICT (tenant) DO UPDATE SET
                    first_seen = LEAST(usage_tenants.first_seen, EXCLUDED.first_seen),
                    last_seen = GREATEST(usage_tenants.last_seen, EXCLUDED.last_seen),
                    last_poll = GREATEST(usage_tenants.last_poll, EXCLUDED.last_poll)
                """,
                logger: logger
            )
        }
        for (key, sighting) in batch.certificates.sorted(by: {
            ($0.key.tenant, $0.key.fingerprint) < ($1.key.tenant, $1.key.fingerprint)
        }) {
            try await connection.query(
                """
                INSERT INTO usage_certificates (tenant, fingerprint, subject, not_after, first_seen, last_seen)
                VALUES (\(key.tenant), \(key.fingerprint), \(sighting.certificate.subject), \(sighting.certificate.notAfter),
                    \(sighting.firstSeen), \(sighting.lastSeen))
                ON CONFLICT (tenant, fingerprint) DO UPDATE SET
                    first_seen = LEAST(usage_certificates.first_seen, EXCLUDED.first_seen),
                    last_seen = GREATEST(usage_certificates.last_seen, EXCLUDED.last_seen)
                """,
                logger: logger
            )
        }
    }

    static func read(
        from firstDay: UsageDay,
        tenant: String?,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws -> StoredUsage {
        var usage = StoredUsage()
        let day = Int32(firstDay.number)
        // `tenant IS NULL OR …`: one statement for all tenants and for one.
        let rows = try await connection.query(
            "SELECT tenant, day, counter, value FROM usage_counts WHERE day >= \(day) AND (\(tenant)::text IS NULL OR tenant = \(tenant))",
            logger: logger
        )
        for try await (name, day, counter, value) in rows.decode((String, Int32, String, Int64).self) {
            usage.counts[.init(tenant: name, day: UsageDay(number: Int(day)), counter: counter)] = value
        }
        let addresses = try await connection.query(
            """
            SELECT tenant, count(DISTINCT address) FROM usage_addresses
            WHERE day >= \(day) AND (\(tenant)::text IS NULL OR tenant = \(tenant)) GROUP BY tenant
            """,
            logger: logger
        )
        for try await (name, count) in addresses.decode((String, Int64).self) {
            usage.distinctAddresses[name] = Int(count)
        }
        let tenants = try await connection.query(
            "SELECT tenant, first_seen, last_seen, last_poll FROM usage_tenants WHERE \(tenant)::text IS NULL OR tenant = \(tenant)",
            logger: logger
        )
        for try await (name, firstSeen, lastSeen, lastPoll) in tenants.decode((String, Int64?, Int64?, Int64?).self) {
            usage.tenants[name] = .init(firstSeen: firstSeen, lastSeen: lastSeen, lastPoll: lastPoll)
        }
        let certificates = try await connection.query(
            """
            SELECT tenant, fingerprint, subject, not_after, first_seen, last_seen FROM usage_certificates
            WHERE \(tenant)::text IS NULL OR tenant = \(tenant) ORDER BY last_seen DESC
            """,
            logger: logger
        )
        for try await (name, fingerprint, subject, notAfter, firstSeen, lastSeen) in certificates.decode(
            (String, String, String, Int64, Int64, Int64).self
        ) {
            let certificate = SeenCertificate(fingerprint: fingerprint, subject: subject, notAfter: notAfter)
            usage.certificates[name, default: []].append(
                .init(certificate: certificate, firstSeen: firstSeen, lastSeen: lastSeen)
            )
        }
        let backlogs = try await connection.query(
            """
            SELECT tenant, count(*), min(recorded_at) FROM feedback_entries
            WHERE \(tenant)::text IS NULL OR tenant = \(tenant) GROUP BY tenant
            """,
            logger: logger
        )
        for try await (name, count, oldest) in backlogs.decode((String, Int64, Int64?).self) {
            usage.backlogs[name] = .init(tokens: Int(count), oldestRecorded: oldest)
        }
        return usage
    }

    /// Removes the days before `firstKept`, and tenants and certificates last seen before it.
    static func removeExpired(
        before firstKept: UsageDay,
        on connection: PostgresConnection,
        logger: Logger
    ) async throws -> Int {
        let day = Int32(firstKept.number)
        let cutoff = Int64(firstKept.start.timeIntervalSince1970)
        var removed = 0
        for statement: PostgresQuery in [
            "DELETE FROM usage_counts WHERE day < \(day) RETURNING day",
            "DELETE FROM usage_addresses WHERE day < \(day) RETURNING day",
            "DELETE FROM usage_certificates WHERE last_seen < \(cutoff) RETURNING last_seen",
            "DELETE FROM usage_tenants WHERE coalesce(last_seen, 0) < \(cutoff) AND coalesce(last_poll, 0) < \(cutoff) RETURNING tenant",
        ] {
            for try await _ in try await connection.query(statement, logger: logger) { removed += 1 }
        }
        return removed
    }
}

extension PostgresBridgeStore {
    package func recordUsage(_ batch: UsageBatch) async throws {
        guard !batch.isEmpty else { return }
        try await Self.retryingConflicts(logger: self.logger) {
            try await Self.withConnection(self.client, timeout: self.configuration.statementTimeout) { connection in
                try await connection.withTransaction(logger: self.logger) { connection in
                    try await PostgresUsage.write(batch, on: connection, logger: self.logger)
                }
            }
        }
    }

    package func usage(from firstDay: UsageDay, tenant: String?) async throws -> StoredUsage {
        try await Self.withConnection(self.client, timeout: self.configuration.statementTimeout) { connection in
            try await PostgresUsage.read(from: firstDay, tenant: tenant, on: connection, logger: self.logger)
        }
    }
}

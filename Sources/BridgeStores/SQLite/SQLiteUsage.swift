import BridgeCore
import Foundation
import Logging
import SQLiteNIO

/// The usage tables of the SQLite store (schema 2) and their statements, shared by the store
/// and by ``SQLiteStoreReader`` (`apns-bridge report` on a file a bridge may have open).
enum SQLiteUsage {
    static let schema = [
        """
        CREATE TABLE usage_counts (
            tenant TEXT NOT NULL, day INTEGER NOT NULL, counter TEXT NOT NULL, value INTEGER NOT NULL,
            PRIMARY KEY (tenant, day, counter)
        ) WITHOUT ROWID
        """,
        """
        CREATE TABLE usage_addresses (
            tenant TEXT NOT NULL, day INTEGER NOT NULL, address TEXT NOT NULL,
            PRIMARY KEY (tenant, day, address)
        ) WITHOUT ROWID
        """,
        "CREATE TABLE usage_tenants (tenant TEXT PRIMARY KEY, first_seen INTEGER, last_seen INTEGER, last_poll INTEGER)",
        """
        CREATE TABLE usage_certificates (
            tenant TEXT NOT NULL, fingerprint TEXT NOT NULL, subject TEXT NOT NULL, not_after INTEGER NOT NULL,
            first_seen INTEGER NOT NULL, last_seen INTEGER NOT NULL,
            PRIMARY KEY (tenant, fingerprint)
        )
        """,
    ]

    /// Adds a batch (in the caller's transaction).
    static func write(_ batch: UsageBatch, to connection: SQLiteConnection) async throws {
        for (key, value) in batch.counts {
            _ = try await connection.query(
                """
                INSERT INTO usage_counts (tenant, day, counter, value) VALUES (?, ?, ?, ?)
                ON CONFLICT (tenant, day, counter) DO UPDATE SET value =
                    CASE WHEN value > 9223372036854775807 - excluded.value THEN 9223372036854775807
                    ELSE value + excluded.value END
                """,
                [.text(key.tenant), .integer(key.day.number), .text(key.counter), .integer(Int(value))]
            )
        }
        for key in batch.addresses {
            _ = try await connection.query(
                "INSERT INTO usage_addresses (tenant, day, address) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                [.text(key.tenant), .integer(key.day.number), .text(key.address)]
            )
        }
        for (tenant, times) in batch.tenants {
            // SQLite's two-argument min and max are NULL when either is: coalesce keeps the other.
            _ = try await connection.query(
                """
                INSERT INTO usage_tenants (tenant, first_seen, last_seen, last_poll) VALUES (?, ?, ?, ?)
                ON CONFLICT (tenant) DO UPDATE SET
                    first_seen = coalesce(min(first_seen, excluded.first_seen), first_seen, excluded.first_seen),
                    last_seen = coalesce(max(last_seen, excluded.last_seen), last_seen, excluded.last_seen),
                    last_poll = coalesce(max(last_poll, excluded.last_poll), last_poll, excluded.last_poll)
                """,
                [
                    .text(tenant), Self.optional(times.firstSeen), Self.optional(times.lastSeen),
                    Self.optional(times.lastPoll),
                ]
            )
        }
        for (key, sighting) in batch.certificates {
            _ = try await connection.query(
                """
                INSERT INTO usage_certificates (tenant, fingerprint, subject, not_after, first_seen, last_seen)
                VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (tenant, fingerprint) DO UPDATE SET
                    first_seen = min(first_seen, excluded.first_seen), last_seen = max(last_seen, excluded.last_seen)
                """,
                [
                    .text(key.tenant), .text(key.fingerprint), .text(sighting.certificate.subject),
                    .integer(Int(sighting.certificate.notAfter)), .integer(Int(sighting.firstSeen)),
                    .integer(Int(sighting.lastSeen)),
                ]
            )
        }
    }

    static func read(
        from firstDay: UsageDay,
        tenant: String?,
        connection: SQLiteConnection,
        corrupt: CorruptValues
    ) async throws -> StoredUsage {
        var usage = StoredUsage()
        let onlyTenant = tenant == nil ? "" : " AND tenant = ?"
        let tenantBinding: [SQLiteData] = tenant.map { [.text($0)] } ?? []
        for row in try await connection.query(
            "SELECT tenant, day, counter, value FROM usage_counts WHERE day >= ?\(onlyTenant)",
            [.integer(firstDay.number)] + tenantBinding
        ) {
            guard let name = row.column("tenant")?.string, let day = row.storedInteger("day", corrupt: corrupt),
                let counter = row.column("counter")?.string, let value = row.storedInteger("value", corrupt: corrupt)
            else { continue }
            usage.counts[.init(tenant: name, day: UsageDay(number: day), counter: counter)] = Int64(value)
        }
        for row in try await connection.query(
            "SELECT tenant, count(DISTINCT address) AS n FROM usage_addresses WHERE day >= ?\(onlyTenant) GROUP BY tenant",
            [.integer(firstDay.number)] + tenantBinding
        ) {
            guard let name = row.column("tenant")?.string, let count = row.storedInteger("n", corrupt: corrupt) else {
                continue
            }
            usage.distinctAddresses[name] = count
        }
        let whereTenant = tenant == nil ? "" : " WHERE tenant = ?"
        for row in try await connection.query(
            "SELECT tenant, first_seen, last_seen, last_poll FROM usage_tenants\(whereTenant)",
            tenantBinding
        ) {
            guard let name = row.column("tenant")?.string else { continue }
            usage.tenants[name] = .init(
                firstSeen: row.storedInteger("first_seen", corrupt: corrupt).map(Int64.init),
                lastSeen: row.storedInteger("last_seen", corrupt: corrupt).map(Int64.init),
                lastPoll: row.storedInteger("last_poll", corrupt: corrupt).map(Int64.init)
            )
        }
        for row in try await connection.query(
            "SELECT tenant, fingerprint, subject, not_after, first_seen, last_seen FROM usage_certificates\(whereTenant) ORDER BY last_seen DESC",
            tenantBinding
        ) {
            guard let name = row.column("tenant")?.string, let fingerprint = row.column("fingerprint")?.string,
                let subject = row.column("subject")?.string,
                let notAfter = row.storedInteger("not_after", corrupt: corrupt),
                let firstSeen = row.storedInteger("first_seen", corrupt: corrupt),
                let lastSeen = row.storedInteger("last_seen", corrupt: corrupt)
            else { continue }
            let certificate = SeenCertificate(fingerprint: fingerprint, subject: subject, notAfter: Int64(notAfter))
            usage.certificates[name, default: []].append(
                .init(certificate: certificate, firstSeen: Int64(firstSeen), lastSeen: Int64(lastSeen))
            )
        }
        for row in try await connection.query(
            "SELECT tenant, count(*) AS n, min(recorded_at) AS oldest FROM feedback_entries\(whereTenant) GROUP BY tenant",
            tenantBinding
        ) {
            guard let name = row.column("tenant")?.string, let count = row.storedInteger("n", corrupt: corrupt) else {
                continue
            }
            usage.backlogs[name] = .init(
                tokens: count,
                oldestRecorded: row.storedInteger("oldest", corrupt: corrupt).map(Int64.init)
            )
        }
        return usage
    }

    /// Removes the days before `firstKept`, and tenants and certificates last seen before it.
    static func removeExpired(before firstKept: UsageDay, connection: SQLiteConnection) async throws -> Int {
        let cutoff = Int(firstKept.start.timeIntervalSince1970)
        var removed = 0
        for (statement, value) in [
            ("DELETE FROM usage_counts WHERE day < ? RETURNING day", firstKept.number),
            ("DELETE FROM usage_addresses WHERE day < ? RETURNING day", firstKept.number),
            ("DELETE FROM usage_certificates WHERE last_seen < ? RETURNING last_seen", cutoff),
            (
                "DELETE FROM usage_tenants WHERE coalesce(last_seen, 0) < ?1 AND coalesce(last_poll, 0) < ?1 RETURNING tenant",
                cutoff
            ),
        ] {
            removed += try await connection.query(statement, [.integer(value)]).count
        }
        return removed
    }

    private static func optional(_ value: Int64?) -> SQLiteData {
        value.map { .integer(Int($0)) } ?? .null
    }
}

extension SQLiteBridgeStore {
    package func recordUsage(_ batch: UsageBatch) async throws {
        guard !batch.isEmpty else { return }
        try await self.lock.withLock {
            try await Self.transaction(self.connection) {
                try await SQLiteUsage.write(batch, to: self.connection)
            }
        }
    }

    package func usage(from firstDay: UsageDay, tenant: String?) async throws -> StoredUsage {
        try await self.lock.withLock {
            try await SQLiteUsage.read(
                from: firstDay,
                tenant: tenant,
                connection: self.connection,
                corrupt: self.health.corruptValues
            )
        }
    }
}

import BridgeCore
import Foundation
import Logging
import PostgresNIO

/// Reads the usage of a PostgreSQL store without joining it as an instance (no heartbeat, no
/// schema change): `apns-bridge report`, beside running bridges or none.
package struct PostgresUsageReader: UsageSource {
    private let client: PostgresClient
    private let logger: Logger

    /// Connects, checks that the schema has the usage tables, and runs `body` with the reader;
    /// the client runs in a child task until `body` returns.
    package static func withReader<Result: Sendable>(
        url: String,
        logger: Logger,
        _ body: @Sendable (PostgresUsageReader) async throws -> Result
    ) async throws -> Result {
        try await PostgresBridgeStore.checkReachable(url: url)
        var configuration = try PostgresBridgeStore.clientConfiguration(url: url)
        configuration.options.maximumConnections = 2
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        return try await withThrowingTaskGroup(of: Void.self, returning: Result.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            try await Self.checkSchema(client, logger: logger)
            return try await body(PostgresUsageReader(client: client, logger: logger))
        }
    }

    private static func checkSchema(_ client: PostgresClient, logger: Logger) async throws {
        var hasSchema = false
        for try await found in try await client.query(
            "SELECT to_regclass('apns_bridge_schema') IS NOT NULL",
            logger: logger
        ).decode(Bool.self) {
            hasSchema = found
        }
        var version = 0
        if hasSchema {
            for try await found in try await client.query("SELECT max(version) FROM apns_bridge_schema", logger: logger)
                .decode(Int?.self)
            {
                version = found ?? 0
            }
        }
        guard version >= 3 else { throw StoreError.noUsage(found: version) }
        if version > PostgresBridgeStore.schemaVersion {
            throw StoreError.schemaTooNew(found: version, known: PostgresBridgeStore.schemaVersion)
        }
    }

    package func usage(from firstDay: UsageDay, tenant: String?) async throws -> StoredUsage {
        try await PostgresBridgeStore.withConnection(
            self.client,
            timeout: BridgeStoreConfiguration().statementTimeout
        ) { [logger] connection in
            try await PostgresUsage.read(from: firstDay, tenant: tenant, on: connection, logger: logger)
        }
    }
}

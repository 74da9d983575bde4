import BridgeCore
import Foundation
import Logging
import PostgresNIO

/// Reads the usage and the push log's failures of a PostgreSQL store without joining it as an
/// instance (no heartbeat, no schema change): `apns-bridge report` and `apns-bridge log --store`,
/// beside running bridges or none.
package struct PostgresStoreReader: UsageSource, PushFailureSource {
    private let client: PostgresClient
    private let logger: Logger
    /// The database's schema version.
    private let version: Int

    /// Connects, checks that the schema has the usage tables, and runs `body` with the reader;
    /// the client runs in a child task until `body` returns.
    package static func withReader<Result: Sendable>(
        url: String,
        logger: Logger,
        _ body: @Sendable (PostgresStoreReader) async throws -> Result
    ) async throws -> Result {
        try await PostgresBridgeStore.checkReachable(url: url)
        var configuration = try PostgresBridgeStore.clientConfiguration(url: url)
        configuration.options.maximumConnections = 2
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        return try await withThrowingTaskGroup(of: Void.self, returning: Result.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            let version = try await Self.checkSchema(client, logger: logger)
            return try await body(PostgresStoreReader(client: client, logger: logger, version: version))
        }
    }

    private static func checkSchema(_ client: PostgresClient, logger: Logger) async throws -> Int {
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
        return version
    }

    package func usage(from firstDay: UsageDay, tenant: String?) async throws -> StoredUsage {
        try await PostgresBridgeStore.withConnection(
            self.client,
            timeout: BridgeStoreConfiguration().statementTimeout
        ) { [logger] connection in
            try await PostgresUsage.read(from: firstDay, tenant: tenant, on: connection, logger: logger)
        }
    }

    package func pushFailures(matching query: PushLogQuery) async throws -> [StoredPushFailure] {
        guard self.version >= 5 else { throw StoreError.noPushFailures(found: self.version) }
        return try await PostgresBridgeStore.withConnection(
            self.client,
            timeout: BridgeStoreConfiguration().statementTimeout
        ) { [logger] connection in
            try await PostgresPushFailures.read(matching: query, on: connection, logger: logger)
        }
    }
}

import BridgeCore
import Foundation
import Logging
import SQLiteNIO

/// Reads the usage and the push log's failures of a SQLite store without opening it as a
/// bridge does: no schema change, no release of claims or records, so it is safe on a file a
/// running bridge has open (WAL lets a reader in beside the writer).
package final class SQLiteStoreReader: UsageSource, PushFailureSource {
    private let connection: SQLiteConnection
    private let corruptValues: CorruptValues
    /// The file's schema version.
    private let version: Int

    private init(connection: SQLiteConnection, version: Int, logger: Logger) {
        self.connection = connection
        self.version = version
        self.corruptValues = CorruptValues(logger: logger)
    }

    package static func open(path: String, logger: Logger) async throws -> SQLiteStoreReader {
        guard FileManager.default.fileExists(atPath: path) else {
            throw StoreError.invalidURL("sqlite:\(path): no such file (has a bridge run with this store?)")
        }
        let connection = try await SQLiteConnection.open(storage: .file(path: path), logger: logger)
        do {
            _ = try await connection.query("PRAGMA busy_timeout = 5000")
            let version =
                try await connection.query("PRAGMA user_version").first?.column("user_version")?.storedInteger ?? 0
            guard version >= 2 else {
                throw StoreError.noUsage(found: version)
            }
            if version > SQLiteBridgeStore.schemaVersion {
                throw StoreError.schemaTooNew(found: version, known: SQLiteBridgeStore.schemaVersion)
            }
            return SQLiteStoreReader(connection: connection, version: version, logger: logger)
        } catch {
            try? await connection.close()
            throw error
        }
    }

    package func usage(from firstDay: UsageDay, tenant: String?) async throws -> StoredUsage {
        try await SQLiteUsage.read(
            from: firstDay,
            tenant: tenant,
            connection: self.connection,
            corrupt: self.corruptValues
        )
    }

    package func pushFailures(matching query: PushLogQuery) async throws -> [StoredPushFailure] {
        guard self.version >= 4 else { throw StoreError.noPushFailures(found: self.version) }
        return try await SQLitePushFailures.read(
            matching: query,
            connection: self.connection,
            corrupt: self.corruptValues
        )
    }

    package func close() async {
        try? await self.connection.close()
    }
}

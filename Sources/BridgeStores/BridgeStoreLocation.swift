import BridgeCore
import Foundation
import Logging
import NIOCore

/// Opens the store a URL names: `sqlite:PATH` for the embedded store, `postgres://…` for the
/// shared one.
package enum BridgeStoreLocation {
    /// Opens the store without a scope (the tests): `backgroundWork` runs its background work
    /// where the caller decides, until the store's `close()`, which must be called. The bridge
    /// uses ``withStore(_:configuration:logger:_:)``.
    package static func open(
        _ location: String,
        configuration: BridgeStoreConfiguration = .init(),
        logger: Logger,
        backgroundWork: (BackgroundWork) -> Void
    ) async throws -> any BridgeStore {
        if location.hasPrefix("postgres://") || location.hasPrefix("postgresql://") {
            return try await PostgresBridgeStore.connect(
                url: location,
                configuration: configuration,
                logger: logger,
                backgroundWork: backgroundWork
            )
        }
        if location.hasPrefix("sqlite:") {
            let path = String(location.dropFirst("sqlite:".count))
            guard !path.isEmpty else { throw StoreError.invalidURL("sqlite: needs a file path") }
            return try await SQLiteBridgeStore.open(
                path: path,
                configuration: configuration,
                synchronous: configuration.sqliteSynchronous,
                logger: logger,
                backgroundWork: backgroundWork
            )
        }
        throw StoreError.invalidURL("\(location): expected sqlite:PATH or postgres://user@host/database")
    }

    /// Opens the store `location` names, runs `body` with it, and closes it when `body` returns
    /// or throws (a store already closed stays closed). The store's background work (the
    /// feedback commits; for PostgreSQL also its client, LISTEN and heartbeat) runs as child
    /// tasks of this call.
    package static func withStore<Result: Sendable>(
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
    package static func redacted(_ location: String) -> String {
        location.hasPrefix("sqlite:") ? location : PostgresBridgeStore.redacted(location)
    }

    /// Opens the store a URL names for reading only (`apns-bridge report`, `apns-bridge log
    /// --store`), without joining it as a bridge does, runs `body` with it, and closes it.
    package static func withReader<Result: Sendable>(
        _ location: String,
        logger: Logger,
        _ body: @Sendable (any UsageSource & PushFailureSource) async throws -> Result
    ) async throws -> Result {
        if location.hasPrefix("postgres://") || location.hasPrefix("postgresql://") {
            return try await PostgresStoreReader.withReader(url: location, logger: logger) { try await body($0) }
        }
        if location.hasPrefix("sqlite:") {
            let reader = try await SQLiteStoreReader.open(
                path: String(location.dropFirst("sqlite:".count)),
                logger: logger
            )
            do {
                let result = try await body(reader)
                await reader.close()
                return result
            } catch {
                await reader.close()
                throw error
            }
        }
        throw StoreError.invalidURL("\(location): expected sqlite:PATH or postgres://user@host/database")
    }
}

import BridgeStores
import Foundation
import Logging
import PostgresNIO

/// The two store implementations, for tests that run against both.
package enum StoreKind: String, CaseIterable, Sendable {
    case sqlite
    case postgres

    /// A new, empty store location of this kind.
    package func makeLocation() async throws -> String {
        switch self {
        case .sqlite: try TestDatabases.sqliteLocation()
        case .postgres: try await TestDatabases.postgresLocation()
        }
    }

    /// Opens a store outside a scope: its background work runs in tasks of their own until
    /// the test closes it.
    package func open(
        _ location: String,
        configuration: BridgeStoreConfiguration = .init()
    ) async throws -> any BridgeStore {
        try await BridgeStoreLocation.open(
            location,
            configuration: configuration,
            logger: Logger.forTests("apns-bridge.test.store"),
            backgroundWork: Self.inTasksOfTheirOwn
        )
    }

    /// For a store a test opens without a scope: each piece of its background work in a task
    /// of its own, which the store's `close()` stops and waits for.
    package static let inTasksOfTheirOwn: @Sendable (BackgroundWork) -> Void = { work in
        Task { await work.run() }
    }
}

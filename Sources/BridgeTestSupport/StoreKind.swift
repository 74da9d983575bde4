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

    package func open(
        _ location: String,
        configuration: BridgeStoreConfiguration = .init()
    ) async throws -> any BridgeStore {
        try await BridgeStoreLocation.open(
            location,
            configuration: configuration,
            logger: Logger.forTests("apns-bridge.test.store")
        )
    }
}

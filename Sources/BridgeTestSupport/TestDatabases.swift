import BridgeStores
import Foundation
import Logging
import PostgresNIO

/// Databases for tests: a new SQLite file, or a new database on the PostgreSQL server named
/// by `APNS_BRIDGE_TEST_POSTGRES_URL` (`scripts/test` starts a throwaway one and sets it).
package enum TestDatabases {
    package static var postgresURL: String? {
        ProcessInfo.processInfo.environment["APNS_BRIDGE_TEST_POSTGRES_URL"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// A path for a new SQLite database in a new temporary folder.
    package static func sqliteLocation() throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "apns-bridge-test-\(UUID().uuidString)"
        )
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return "sqlite:" + directory.appendingPathComponent("store.sqlite").path
    }

    /// Creates an empty database on the test server and returns its URL.
    package static func postgresLocation() async throws -> String {
        guard let base = Self.postgresURL, var components = URLComponents(string: base) else {
            throw TestDatabaseUnavailable()
        }
        let name =
            "apns_bridge_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(16)
        var logger = Logger(label: "test.postgres")
        logger.logLevel = .error  // not the warning about a lease requested before run() started
        let client = PostgresClient(
            configuration: try PostgresBridgeStore.clientConfiguration(url: base),
            backgroundLogger: logger
        )
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            try await client.query("CREATE DATABASE \(unescaped: name)")
            group.cancelAll()
        }
        components.path = "/" + name
        return components.string!
    }

    package struct TestDatabaseUnavailable: Error, CustomStringConvertible {
        package var description: String {
            "APNS_BRIDGE_TEST_POSTGRES_URL is not set: run the tests with scripts/test, which starts a throwaway PostgreSQL"
        }
    }
}

extension StoreKind {
    /// The kinds these tests can reach: SQLite always, PostgreSQL when a test server is set.
    /// (A separate test reports itself skipped when PostgreSQL is missing, and CI fails on a skip.)
    package static var available: [StoreKind] {
        TestDatabases.postgresURL == nil ? [.sqlite] : [.sqlite, .postgres]
    }
}

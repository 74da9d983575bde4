import BridgeStores
import Foundation

/// The store (`store.url` and its options) and how long usage is kept.
extension BridgeSettings {
    static func readStore(
        _ settings: SettingsReader
    ) throws -> (location: String, configuration: BridgeStoreConfiguration) {
        let location = settings.string(.storeURL) ?? "sqlite:apns-bridge.sqlite"
        guard location.hasPrefix("sqlite:") || location.hasPrefix("postgres://") || location.hasPrefix("postgresql://")
        else {
            throw ConfigurationError(
                key: ConfigurationKey.storeURL.name,
                "expected sqlite:PATH or postgres://user:password@host:port/database"
            )
        }
        try Self.checkStoreLocation(location)
        var store = BridgeStoreConfiguration()
        store.feedbackRetention = try settings.duration(.feedbackRetention, default: store.feedbackRetention)
        store.resendRecordWindow = try settings.duration(.storeResendWindow, default: store.resendRecordWindow)
        store.sqliteSynchronous = try settings.choice(
            .storeSQLiteSynchronous,
            default: store.sqliteSynchronous,
            ["full": .full, "normal": .normal]
        )
        store.usageRetention = try settings.duration(.usageRetention, default: store.usageRetention)
        return (location, store)
    }

    /// `sqlite:PATH` must name a file that can be created or opened as a database; a
    /// PostgreSQL URL must parse. Checked before anything is opened or bound.
    static func checkStoreLocation(_ location: String) throws {
        if location.hasPrefix("sqlite:") {
            let path = String(location.dropFirst("sqlite:".count))
            guard !path.isEmpty else { throw ConfigurationError(.storeURL, "sqlite: needs a file path") }
            let directory =
                (path as NSString).deletingLastPathComponent.isEmpty
                ? "." : (path as NSString).deletingLastPathComponent
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue
            else {
                throw ConfigurationError(.storeURL, "the folder \(directory) of \(path) does not exist")
            }
            // SQLite writes its journal beside the file: a file must be creatable there. Asking
            // for write permission is not enough (root may write to /proc, where nothing can be
            // created), so a probe file is created and removed at once.
            let probe = (directory as NSString).appendingPathComponent(".apns-bridge-check-\(UUID().uuidString)")
            guard FileManager.default.createFile(atPath: probe, contents: nil) else {
                throw ConfigurationError(
                    key: "store.url",
                    "cannot create files in the folder \(directory) of \(path) (not writable, or a read-only or special file system); SQLite writes its journal beside the file"
                )
            }
            try? FileManager.default.removeItem(atPath: probe)
            if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) {
                guard !isDirectory.boolValue else {
                    throw ConfigurationError(.storeURL, "\(path) is a folder, not a database file")
                }
                let type =
                    (try? FileManager.default.attributesOfItem(atPath: (path as NSString).resolvingSymlinksInPath))?[
                        .type
                    ] as? FileAttributeType
                guard type == .typeRegular else {
                    throw ConfigurationError(
                        key: "store.url",
                        "\(path) is not a regular file (a device, a pipe or a socket cannot hold the database)"
                    )
                }
                guard let handle = FileHandle(forReadingAtPath: path) else {
                    throw ConfigurationError(.storeURL, "cannot read \(path)")
                }
                defer { try? handle.close() }
                let header = (try? handle.read(upToCount: 16)) ?? Data()
                if !header.isEmpty, header != Data("SQLite format 3\0".utf8) {
                    throw ConfigurationError(.storeURL, "\(path) exists and is not an SQLite database")
                }
            }
        } else {
            do {
                _ = try PostgresBridgeStore.clientConfiguration(url: location)
            } catch {
                throw ConfigurationError(.storeURL, "\(BridgeStoreLocation.redacted(location)): \(error)")
            }
        }
    }
}

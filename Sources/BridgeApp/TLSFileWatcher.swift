import BridgeServer
import Foundation
import Logging
import Synchronization

/// Reloads the legacy listeners' certificate, key and client CAs when their files change
/// (modification time or size): new handshakes use the new files, open connections keep
/// theirs. A replacement that cannot be read is logged and the previous one stays in use.
final class TLSFileWatcher: Sendable {
    private let settings: BridgeSettings
    private let context: LegacyTLSContext
    private let logger: Logger
    private let lastSeen: Mutex<[String]>

    init(settings: BridgeSettings, context: LegacyTLSContext, logger: Logger) {
        self.settings = settings
        self.context = context
        self.logger = logger
        self.lastSeen = Mutex(Self.stamps(settings.tlsFiles))
    }

    private static func stamps(_ files: BridgeSettings.TLSFiles) -> [String] {
        ([files.certificate, files.privateKey] + files.clientCAs).map { path in
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else { return "missing" }
            let modified = (attributes[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0
            let size = (attributes[.size] as? Int) ?? 0
            return "\(modified)/\(size)"
        }
    }

    func check() {
        let now = Self.stamps(self.settings.tlsFiles)
        let changed = self.lastSeen.withLock { seen -> Bool in
            guard seen != now else { return false }
            seen = now
            return true
        }
        guard changed else { return }
        do {
            try self.context.reload(try self.settings.reloadedTLS())
            self.logger.info("reloaded the legacy listeners' TLS files", metadata: ["certificate": "\(self.settings.tlsFiles.certificate)"])
        } catch {
            self.logger.error("cannot reload the legacy listeners' TLS files; keeping the previous ones", metadata: ["error": "\(error)"])
        }
    }
}

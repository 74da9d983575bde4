import Configuration
import CoreMetrics
import Foundation
import Logging
import ServiceLifecycle
import SystemPackage
import UnixSignals

/// What asks for a reload while the bridge runs: SIGHUP always; with a watch interval, a change
/// of the configuration file (swift-configuration's `ReloadingFileProvider` notices it) or of a
/// file the configuration names (certificates, keys, CA bundles). `apns-bridge reload` goes
/// through the admin port (``AdminServer``) to the same ``ConfigurationReloader``.
struct ReloadService: Service {
    var reloader: ConfigurationReloader
    /// SIGHUP, trapped at start-up: a signal that arrives before the service runs is kept, not
    /// left to its default action (which ends the process).
    var signals: UnixSignalsSequence
    /// Watches the configuration file; made at start-up, so that a change made as soon as the
    /// bridge is ready is a change from what it read.
    var configFileWatch: ReloadingFileProvider<YAMLSnapshot>?
    var watchInterval: Duration?
    var logger: Logger

    /// The watch of `file`, if there is a file and watching is on.
    static func watch(
        _ file: String?,
        every interval: Duration?,
        logger: Logger
    ) async throws -> ReloadingFileProvider<YAMLSnapshot>? {
        guard let file, let interval else { return nil }
        return try await ReloadingFileProvider<YAMLSnapshot>(
            filePath: FilePath(file),
            pollInterval: interval,
            logger: logger,
            metrics: NOOPMetricsHandler.instance
        )
    }

    func run() async throws {
        do {
            try await self.watch()
        } catch is CancellationError {
            // Graceful shutdown cancels the watches: how this service ends, not a failure.
        }
    }

    private func watch() async throws {
        let signals = self.signals
        try await cancelWhenGracefulShutdown {
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask {
                    for await _ in signals {
                        await self.reloader.reload(trigger: "SIGHUP")
                    }
                }
                guard let interval = self.watchInterval else { return }
                if let provider = self.configFileWatch {
                    group.addTask { try await provider.run() }
                    group.addTask {
                        try await provider.watchSnapshot { updates in
                            var isFirst = true  // the snapshot in force when watching starts
                            for try await _ in updates {
                                if isFirst {
                                    isFirst = false
                                    continue
                                }
                                await self.reloader.reload(trigger: "config file changed")
                            }
                        }
                    }
                }
                group.addTask { try await self.watchNamedFiles(every: interval) }
            }
        }
    }

    /// Reloads when a file the settings name changes (modification time, size, or a symlink
    /// pointing elsewhere: how Kubernetes replaces mounted secrets).
    private func watchNamedFiles(every interval: Duration) async throws {
        var lastSeen = Self.stamps(await self.reloader.settings.namedFiles)
        while true {
            try await Task.sleep(for: interval)
            let files = await self.reloader.settings.namedFiles
            let now = Self.stamps(files)
            if now != lastSeen {
                await self.reloader.reload(trigger: "named file changed")
                lastSeen = Self.stamps(await self.reloader.settings.namedFiles)
            }
        }
    }

    private static func stamps(_ files: [String]) -> [String: String] {
        var stamps: [String: String] = [:]
        for path in files {
            let resolved = (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? path
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: path) else {
                stamps[path] = "missing"
                continue
            }
            let modified = (attributes[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0
            let size = (attributes[.size] as? Int) ?? 0
            stamps[path] = "\(resolved)/\(modified)/\(size)"
        }
        return stamps
    }
}

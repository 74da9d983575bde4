import Foundation
import Logging
import Synchronization

/// The bridge's swift-log handler: one line per event on standard error, in the text format
/// (``TextLogLine``) or the JSON format (``JSONLogLine``); whole lines go out one at a
/// time.
package struct BridgeLogHandler: LogHandler {
    package var logLevel: Logger.Level
    package var metadata: Logger.Metadata = [:]
    package var metadataProvider: Logger.MetadataProvider?
    private let label: String
    private let format: LogFormat

    private static let output = Mutex(FileHandle.standardError)

    package init(
        label: String,
        format: LogFormat,
        logLevel: Logger.Level,
        metadataProvider: Logger.MetadataProvider? = nil
    ) {
        self.label = label
        self.format = format
        self.logLevel = logLevel
        self.metadataProvider = metadataProvider
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        var merged = self.metadata
        if let provided = self.metadataProvider?.get() {
            merged.merge(provided) { $1 }
        }
        if let metadata = event.metadata {
            merged.merge(metadata) { $1 }
        }
        let message = "\(event.message)"
        let line =
            switch self.format {
            case .text:
                TextLogLine.line(
                    timestamp: TextLogLine.timestamp(),
                    level: event.level,
                    label: self.label,
                    message: message,
                    metadata: merged,
                    source: event.source
                )
            case .json:
                JSONLogLine.line(
                    timestamp: Date(),
                    level: event.level,
                    label: self.label,
                    message: message,
                    metadata: merged,
                    source: event.source
                )
            }
        Self.output.withLock { $0.write(Data((line + "\n").utf8)) }
    }
}

import Foundation
import Logging
import Synchronization

/// How `serve` writes its log to standard error.
public enum LogFormat: String, Sendable, CaseIterable {
    /// swift-log's `StreamLogHandler`: one human-readable line per event.
    case text
    /// One JSON object per line (JSON Lines), for log shippers: `timestamp` (ISO 8601, UTC,
    /// milliseconds), `level`, `label`, `message`, `metadata` (an object of strings), `source`.
    case json
}

/// A swift-log handler that writes one JSON object per event, one per line, to standard error.
///
/// What goes into a line is what the call site logs: the bridge's own lines already shorten
/// tokens and never carry keys, tokens or payloads at info and above, in either format.
public struct JSONLogHandler: LogHandler {
    public var logLevel: Logger.Level
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let label: String

    /// Lines from all handlers go out whole, one at a time.
    private static let output = Mutex(FileHandle.standardError)

    public init(label: String, logLevel: Logger.Level, metadataProvider: Logger.MetadataProvider? = nil) {
        self.label = label
        self.logLevel = logLevel
        self.metadataProvider = metadataProvider
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = self.metadata
        if let provided = self.metadataProvider?.get() {
            merged.merge(provided) { $1 }
        }
        if let metadata = event.metadata {
            merged.merge(metadata) { $1 }
        }
        let line = Self.line(
            timestamp: Date(),
            level: event.level,
            label: self.label,
            message: "\(event.message)",
            metadata: merged,
            source: event.source
        )
        Self.output.withLock { $0.write(Data((line + "\n").utf8)) }
    }

    /// One event as a JSON object on one line.
    static func line(timestamp: Date, level: Logger.Level, label: String, message: String, metadata: Logger.Metadata, source: String) -> String {
        var object: [String: Any] = [
            "timestamp": Self.timestamp(timestamp),
            "level": level.rawValue,
            "label": label,
            "message": message,
            "source": source,
        ]
        if !metadata.isEmpty {
            object["metadata"] = metadata.mapValues { "\($0)" }
        }
        // JSONSerialization escapes every control character, so a value can never break the line.
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else {
            return #"{"level":"error","message":"a log line could not be encoded"}"#
        }
        return String(decoding: data, as: UTF8.self)
    }

    private static func timestamp(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))  // 2026-11-24T12:34:56.789Z
    }
}

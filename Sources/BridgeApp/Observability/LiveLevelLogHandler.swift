import Logging
import Synchronization

/// Wraps the process's log handler so that a ``LiveLogLevel`` decides what is logged, unless a
/// logger sets its own level.
public struct LiveLevelLogHandler: LogHandler {
    private var wrapped: any LogHandler
    private let level: LiveLogLevel
    private var ownLevel: Logger.Level?

    public init(wrapping handler: any LogHandler, level: LiveLogLevel) {
        self.wrapped = handler
        self.level = level
    }

    public var logLevel: Logger.Level {
        get { self.ownLevel ?? self.level.current }
        set { self.ownLevel = newValue }
    }

    public var metadata: Logger.Metadata {
        get { self.wrapped.metadata }
        set { self.wrapped.metadata = newValue }
    }

    public var metadataProvider: Logger.MetadataProvider? {
        get { self.wrapped.metadataProvider }
        set { self.wrapped.metadataProvider = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.wrapped[metadataKey: key] }
        set { self.wrapped[metadataKey: key] = newValue }
    }

    public func log(event: LogEvent) {
        self.wrapped.log(event: event)
    }
}

import Logging
import Synchronization

/// Wraps the process's log handler so that a ``LiveLogLevel`` decides what is logged, unless a
/// logger sets its own level.
package struct LiveLevelLogHandler: LogHandler {
    private var wrapped: any LogHandler
    private let level: LiveLogLevel
    private var ownLevel: Logger.Level?

    package init(wrapping handler: any LogHandler, level: LiveLogLevel) {
        self.wrapped = handler
        self.level = level
    }

    package var logLevel: Logger.Level {
        get { self.ownLevel ?? self.level.current }
        set { self.ownLevel = newValue }
    }

    package var metadata: Logger.Metadata {
        get { self.wrapped.metadata }
        set { self.wrapped.metadata = newValue }
    }

    package var metadataProvider: Logger.MetadataProvider? {
        get { self.wrapped.metadataProvider }
        set { self.wrapped.metadataProvider = newValue }
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.wrapped[metadataKey: key] }
        set { self.wrapped[metadataKey: key] = newValue }
    }

    package func log(event: LogEvent) {
        self.wrapped.log(event: event)
    }
}

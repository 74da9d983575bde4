import Logging
import Synchronization

/// The process's log level, changeable while it runs (a configuration reload sets `log.level`).
public final class LiveLogLevel: Sendable {
    private let level: Atomic<Int>

    public init(_ level: Logger.Level) {
        self.level = Atomic(Self.index(level))
    }

    public var current: Logger.Level {
        get { Logger.Level.allCases[self.level.load(ordering: .relaxed)] }
        set { self.level.store(Self.index(newValue), ordering: .relaxed) }
    }

    private static func index(_ level: Logger.Level) -> Int {
        Logger.Level.allCases.firstIndex(of: level)!
    }
}

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

import Logging
import Synchronization

/// The process's log level, changeable while it runs (a configuration reload sets `log.level`).
package final class LiveLogLevel: Sendable {
    private let level: Atomic<Int>

    package init(_ level: Logger.Level) {
        self.level = Atomic(Self.index(level))
    }

    package var current: Logger.Level {
        get { Logger.Level.allCases[self.level.load(ordering: .relaxed)] }
        set { self.level.store(Self.index(newValue), ordering: .relaxed) }
    }

    private static func index(_ level: Logger.Level) -> Int {
        Logger.Level.allCases.firstIndex(of: level)!
    }
}

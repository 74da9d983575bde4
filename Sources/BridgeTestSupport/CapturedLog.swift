import Logging
import Synchronization

/// A logger whose lines are kept in memory, for tests that count what was logged and at what
/// level (every level, whatever APNS_BRIDGE_TEST_LOG says).
package final class CapturedLog: Sendable {
    package struct Line: Sendable {
        package var level: Logger.Level
        package var message: String
        package var metadata: [String: String]
    }

    private let captured = Mutex<[Line]>([])

    package init() {}

    package var lines: [Line] { self.captured.withLock { $0 } }

    package func lines(at level: Logger.Level) -> [Line] { self.lines.filter { $0.level == level } }

    package var logger: Logger {
        var logger = Logger(label: "apns-bridge.captured") { _ in Handler(log: self) }
        logger.logLevel = .trace
        return logger
    }

    fileprivate func append(_ line: Line) {
        self.captured.withLock { $0.append(line) }
    }

    private struct Handler: LogHandler {
        let log: CapturedLog
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { self.metadata[key] }
            set { self.metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = self.metadata.merging(event.metadata ?? [:]) { $1 }
            self.log.append(
                Line(level: event.level, message: "\(event.message)", metadata: merged.mapValues { "\($0)" })
            )
        }
    }
}

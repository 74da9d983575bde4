import Foundation
import Logging
import Synchronization

/// How `serve` writes its log to standard error.
package enum LogFormat: String, Sendable, CaseIterable {
    /// One human-readable line per event, in the layout of swift-log's `StreamLogHandler`, with
    /// control characters in logged values escaped (``TextLogLine``).
    case text
    /// One JSON object per line (JSON Lines), for log shippers: `timestamp` (ISO 8601, UTC,
    /// milliseconds), `level`, `label`, `message`, `metadata` (an object of strings), `source`.
    case json
}

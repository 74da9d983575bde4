import BridgeCore
import LegacyProtocol
import NIOCore
import Synchronization

/// Feedback entries in memory, one per (tenant, environment, token), keeping the latest.
/// For tests of the gateway alone; the feedback service reads a ``FeedbackStore``.
package final class InMemoryFeedbackRecorder: FeedbackRecorder {
    private let entries = Mutex([FeedbackKey: FeedbackEntry]())

    package init() {}

    package func apply(_ change: FeedbackChange, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        var key = change.key
        key.deviceToken = ByteBuffer(buffer: key.deviceToken)  // do not pin the read buffer
        self.entries.withLock { entries in
            switch change {
            case .unregistered(var entry):
                if let existing = entries[key], existing.timestamp > entry.timestamp { return }
                entry.deviceToken = key.deviceToken
                entries[key] = entry
            case .registered:
                entries[key] = nil
            }
        }
        return eventLoop.makeSucceededVoidFuture()
    }

    /// The entries recorded so far, in no particular order.
    package var allEntries: [FeedbackEntry] {
        self.entries.withLock { Array($0.values) }
    }
}

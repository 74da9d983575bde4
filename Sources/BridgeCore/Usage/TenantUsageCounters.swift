import Foundation
import LegacyProtocol
import Synchronization

/// One tenant's notification counters (shared by its connections on every event loop).
public final class TenantUsageCounters: Sendable {
    let tally = Mutex(UsageTally())

    /// A notification's outcome: `command` is the frame's (nil for a frame too malformed to
    /// say), `broadcast` whether it went to a Live Activity channel.
    public func count(command: NotificationFrame.Command?, _ outcome: NotificationOutcome, broadcast: Bool = false) {
        self.tally.withLock { $0.count(command: command, outcome, broadcast: broadcast) }
    }
}

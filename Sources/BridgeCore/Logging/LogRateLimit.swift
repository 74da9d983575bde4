import NIOCore
import Synchronization

/// At most one log line per interval, and how many were left out since the last one: a flood
/// of refusals (from unauthenticated peers) or of faults (from a misbehaving upstream) must not
/// become a flood of log lines.
public final class LogRateLimit: Sendable {
    private struct State {
        var lastLine: NIODeadline?
        var suppressed = 0
    }

    private let interval: TimeAmount
    private let state = Mutex(State())

    public init(interval: TimeAmount = .seconds(10)) {
        self.interval = interval
    }

    /// `nil`: no line now (counted as left out); otherwise how many were left out before it.
    public func admit(now: NIODeadline = .now()) -> Int? {
        self.state.withLock { state in
            if let last = state.lastLine, now - last < self.interval {
                state.suppressed += 1
                return nil
            }
            defer { state.suppressed = 0 }
            state.lastLine = now
            return state.suppressed
        }
    }
}

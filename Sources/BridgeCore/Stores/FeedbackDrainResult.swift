import LegacyProtocol

/// How a drain ended.
public struct FeedbackDrainResult: Hashable, Sendable {
    /// Tuples whose bytes were written and flushed to the poller; their entries are deleted.
    public var delivered: Int
    /// `false` when the poller went away (or a write failed) before the end of the list; the
    /// entries not delivered stay pending for the next poll.
    public var completed: Bool

    public init(delivered: Int, completed: Bool) {
        self.delivered = delivered
        self.completed = completed
    }
}

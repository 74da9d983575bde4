import NIOCore

/// When one attempt gives up (docs/upstream.md#deadlines).
///
/// Two clocks, so that time spent waiting for a stream is never taken from the time APNs has to
/// answer: with APNs answering in 5 s, requests queued behind a new connection's single stream
/// are written 5 s late, and a deadline counted from the queue reset them just before their
/// answers arrived, then sent them again, delivering them twice.
package struct AttemptDeadlines: Sendable, Hashable {
    /// A request still waiting for room on a connection by then fails as unprocessed: it was
    /// never written, so another attempt cannot deliver it twice.
    package var queued: NIODeadline
    /// How long a written request waits for its answer, counted from its write, even past the
    /// budget's end: APNs may be processing it, and resetting it then would report a
    /// notification it received as failed.
    package var answerTimeout: TimeAmount
    /// The end of the retry budget: no attempt is written after it.
    package var budgetEnd: NIODeadline

    package init(queued: NIODeadline, answerTimeout: TimeAmount, budgetEnd: NIODeadline) {
        self.queued = queued
        self.answerTimeout = answerTimeout
        self.budgetEnd = budgetEnd
    }

    /// The moment a request written at `writtenAt` has its stream reset if still unanswered.
    package func answerDeadline(writtenAt: NIODeadline) -> NIODeadline {
        writtenAt + self.answerTimeout
    }
}

import NIOCore

/// How a request reached its ``APNsSendResult``: the attempts the client made and the time
/// from the send to the result, given with the result by the completion-handler form of
/// ``APNsClient``'s `send` that takes two arguments. A push log keeps both beside the answer.
public struct APNsSendSummary: Hashable, Sendable {
    /// Attempts written to a connection or failed in a pool; 0 for a request never sent (a
    /// header HTTP/2 cannot carry, a client already shut down).
    public var attempts: Int
    /// When the request was sent, on the monotonic clock.
    public var sentAt: NIODeadline
    /// From the send to the result.
    public var elapsed: TimeAmount

    public init(attempts: Int, sentAt: NIODeadline, elapsed: TimeAmount) {
        self.attempts = attempts
        self.sentAt = sentAt
        self.elapsed = elapsed
    }
}

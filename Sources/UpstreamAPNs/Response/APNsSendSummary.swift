import NIOCore

/// How a request reached its ``APNsSendResult``: the attempts the client made and the time
/// from the send to the result, given with the result by the completion-handler form of
/// ``APNsClient``'s `send` that takes two arguments. A push log keeps both beside the answer.
public struct APNsSendSummary: Hashable, Sendable {
    /// Attempts written to a connection or failed in a pool; 0 for a request never sent (a
    /// header HTTP/2 cannot carry, a client already shut down).
    public var attempts: Int
    /// From the send to the result, on the monotonic clock.
    public var elapsed: TimeAmount

    public init(attempts: Int, elapsed: TimeAmount) {
        self.attempts = attempts
        self.elapsed = elapsed
    }
}

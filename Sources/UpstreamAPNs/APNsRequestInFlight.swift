import NIOCore

/// One request from ``APNsClient/send(_:on:completion:)`` to its result: its retry state
/// between attempts, and the attempt under way (its authentication token, deadlines, pool and
/// connection).
///
/// One object per request goes down the layers: the pool queues and places it, the connection
/// keeps it with its stream and calls it back (``APNsStreamOwner``). Each layer used to wrap
/// the one below's callback in a closure of its own, and to copy a struct of the request and
/// its retry state at each step: an allocation and a retain of each capture per layer.
///
/// `@unchecked Sendable`: what identifies the request is immutable; the attempt's fields are
/// the client's alone. It sets them as an attempt starts, before it hands the request to a
/// pool (under the pool's lock), and reads them when the attempt ends: the connection calls
/// back once, on its event loop, naming itself, or the pool fails the attempt. The pool and
/// the connection only read what the client set (the deadlines, the authorization) while
/// the attempt is theirs. A retry starts from the callback, or from a task it schedules.
final class APNsRequestInFlight: APNsStreamOwner, @unchecked Sendable {
    let request: APNsRequest
    /// The caller's loop: its pool first, the queue's sweeps, the retries' timers.
    let eventLoop: any EventLoop
    private let completion: @Sendable (APNsSendResult, APNsSendSummary) -> Void
    private let client: APNsClient
    /// When the request came: the summary's elapsed time counts from here.
    private let sentAt: NIODeadline

    var machine: RequestRetryStateMachine
    /// The pool and connection of the last attempt: a retry goes elsewhere where possible.
    var avoid: (pool: Int, connection: Int)?
    /// The authentication token generation, and the header, of the current attempt.
    var tokenGeneration: Int?
    var authorization: String?
    /// The current attempt's start, deadlines and pool.
    var started: NIODeadline
    var deadlines: AttemptDeadlines
    var poolIndex = 0

    /// `startedAt`: when the request came; each attempt sets its own start and deadlines.
    init(
        request: APNsRequest,
        machine: RequestRetryStateMachine,
        startedAt: NIODeadline,
        client: APNsClient,
        eventLoop: any EventLoop,
        completion: @escaping @Sendable (APNsSendResult, APNsSendSummary) -> Void
    ) {
        self.request = request
        self.machine = machine
        self.client = client
        self.eventLoop = eventLoop
        self.completion = completion
        self.sentAt = startedAt
        self.started = startedAt
        self.deadlines = AttemptDeadlines(queued: startedAt, answerTimeout: .zero, budgetEnd: startedAt)
    }

    /// Calls the caller back, once, with the result and what it took; `now`: the clock read
    /// that ended the last attempt.
    func complete(_ result: APNsSendResult, now: NIODeadline) {
        self.completion(
            result,
            APNsSendSummary(attempts: self.machine.attempts, sentAt: self.sentAt, elapsed: now - self.sentAt)
        )
    }

    /// The connection answered the attempt, or ended its stream without an answer.
    func streamEnded(_ result: Result<APNsResponse, APNsStreamFailure>, onConnection connectionID: Int) {
        self.client.attemptEnded(self, result, onConnection: connectionID)
    }

    /// The pool failed the attempt before any connection had it (the queue's deadline, no
    /// connection, a shutdown).
    func failedInPool(_ failure: APNsStreamFailure) {
        self.client.attemptEnded(self, .failure(failure), onConnection: nil)
    }
}

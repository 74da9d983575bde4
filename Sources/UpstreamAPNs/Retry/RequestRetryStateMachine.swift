import NIOCore

/// The retry budget of one request, as a state machine without I/O.
///
/// The client feeds it what happened to each attempt (an answer, or a stream failure) and does
/// what it returns: finish with a result, or send again after a delay. Time is an input of every
/// event (`now` on the monotonic clock, `unixTime` for the notification's expiration), and so is
/// the random source of the jitter: tests drive hours of retries in a moment, deterministically.
///
/// ```
///            answered 200 / an error not retried ──────────────────────────► finished
///  sending ─ answered 429, 5xx ──► (budget allows the backoff?) ── yes ──► sending (after delay)
///     ▲                                                          └─ no ──► finished (that answer)
///     ├── ExpiredProviderToken, TooManyProviderTokenUpdates, IdleTimeout: once, at once
///     │   (a fresh token for ExpiredProviderToken); a second time ──────► finished (that answer)
///     └── stream failure: unprocessed ones at once (twice), then with the backoff;
///         when the budget is gone ──────────────────────────────────────► finished (unanswered)
/// ```
///
/// APNs' rules behind it (seeds `000_…`, `004_…`): 429 and 5xx are temporary and may be retried
/// later; a request above a GOAWAY's last stream id or refused with `REFUSED_STREAM` was not
/// processed and may go again at once; an expired authentication token is replaced (at most once per
/// 20 minutes, which the token source enforces) and the request sent again. A notification
/// whose `apns-expiration` has passed is not retried: APNs would not deliver it anyway.
package struct RequestRetryStateMachine: Sendable {
    package struct Policy: Sendable, Hashable {
        /// How long a request may spend in retries, from its first attempt.
        package var budget: TimeAmount
        /// How long one attempt may wait for room on a connection, and then, from the moment it
        /// is written, for its answer.
        package var requestTimeout: TimeAmount
        /// The first backoff delay; it doubles with each attempt, up to `backoffLimit`.
        package var backoffBase: TimeAmount
        package var backoffLimit: TimeAmount
        /// Unprocessed attempts sent again without a delay, before the backoff applies.
        package var immediateRetries: Int = 2

        package init(budget: TimeAmount, requestTimeout: TimeAmount, backoffBase: TimeAmount, backoffLimit: TimeAmount)
        {
            self.budget = budget
            self.requestTimeout = requestTimeout
            self.backoffBase = backoffBase
            self.backoffLimit = backoffLimit
        }
    }

    /// What the client does next.
    package enum Action: Hashable, Sendable {
        /// Send the request again after `delay` (zero: now). `freshToken`: ask the token source
        /// for the token after the expiry of the one the last attempt used.
        case retry(after: TimeAmount, freshToken: Bool)
        /// The request is over.
        case finish(APNsSendResult)
    }

    /// How the client treats one answer (APNs' documented statuses and reasons).
    package enum AnswerClass: Hashable, Sendable {
        case final
        /// Temporary (429, 5xx): again after a backoff, within the budget.
        case temporary
        /// A authentication-token answer that one more attempt may cure; `freshToken` when the token
        /// itself expired.
        case retryOnce(freshToken: Bool)

        package init(_ response: APNsResponse) {
            switch (response.status, response.reason) {
            case (200, _): self = .final
            case (_, .expiredProviderToken?): self = .retryOnce(freshToken: true)
            case (_, .tooManyProviderTokenUpdates?), (_, .idleTimeout?): self = .retryOnce(freshToken: false)
            case (429, _), (500...599, _): self = .temporary
            default: self = .final
            }
        }
    }

    private let policy: Policy
    private let budgetDeadline: NIODeadline
    /// The notification's `apns-expiration` (UNIX seconds); 0: none.
    private let expiration: UInt32
    package private(set) var attempts = 0
    private var retryOnceUsed = false
    private var immediateRetriesUsed = 0
    private var lastResponse: APNsResponse?
    private var isFinished = false

    package init(policy: Policy, startedAt now: NIODeadline, expiration: UInt32) {
        self.policy = policy
        self.budgetDeadline = now + policy.budget
        self.expiration = expiration
    }

    /// An attempt starts now: returns its deadlines (waiting for room, not past the budget; then
    /// for its answer from the moment it is written, its whole timeout).
    package mutating func attemptStarted(now: NIODeadline) -> AttemptDeadlines {
        precondition(!self.isFinished, "an attempt of a finished request")
        self.attempts += 1
        return AttemptDeadlines(
            queued: min(now + self.policy.requestTimeout, self.budgetDeadline),
            answerTimeout: self.policy.requestTimeout,
            budgetEnd: self.budgetDeadline
        )
    }

    /// The attempt got an answer.
    package mutating func answered(
        _ response: APNsResponse,
        now: NIODeadline,
        unixTime: Double,
        using random: inout some RandomNumberGenerator
    ) -> Action {
        self.lastResponse = response
        switch AnswerClass(response) {
        case .final:
            return self.finish(.answered(response))
        case .retryOnce(let freshToken):
            guard !self.retryOnceUsed else { return self.finish(.answered(response)) }
            self.retryOnceUsed = true
            return .retry(after: .zero, freshToken: freshToken)
        case .temporary:
            let delay = self.backoff(using: &random)
            guard self.mayRetry(after: delay, now: now, unixTime: unixTime) else {
                return self.finish(.answered(response))
            }
            return .retry(after: delay, freshToken: false)
        }
    }

    /// The attempt got no answer.
    package mutating func failed(
        _ failure: APNsStreamFailure,
        now: NIODeadline,
        unixTime: Double,
        using random: inout some RandomNumberGenerator
    ) -> Action {
        if failure.kind == .refused {
            // The server blames the request itself: another attempt, here or on another
            // connection, would fail the same way (and might cost that connection).
            return self.finish(
                .unanswered(
                    APNsSendFailure(kind: .refusedByServer, detail: "\(failure)"),
                    lastResponse: self.lastResponse
                )
            )
        }
        let immediate = failure.kind == .unprocessed && self.immediateRetriesUsed < self.policy.immediateRetries
        let delay = immediate ? .zero : self.backoff(using: &random)
        guard self.mayRetry(after: delay, now: now, unixTime: unixTime) else {
            let detail = "\(self.attempts) attempt(s), the last \(failure)"
            return self.finish(
                .unanswered(
                    APNsSendFailure(kind: .retryBudgetExhausted, detail: detail),
                    lastResponse: self.lastResponse
                )
            )
        }
        if immediate { self.immediateRetriesUsed += 1 }
        return .retry(after: delay, freshToken: false)
    }

    private mutating func finish(_ result: APNsSendResult) -> Action {
        self.isFinished = true
        return .finish(result)
    }

    private func mayRetry(after delay: TimeAmount, now: NIODeadline, unixTime: Double) -> Bool {
        if now + delay >= self.budgetDeadline { return false }
        if self.expiration != 0, unixTime + Double(delay.nanoseconds) / 1e9 > Double(self.expiration) { return false }
        return true
    }

    /// Exponential backoff with jitter: base × 2^(attempts−1), capped, then a random point in its
    /// upper half.
    private func backoff(using random: inout some RandomNumberGenerator) -> TimeAmount {
        let exponential = self.policy.backoffBase.nanoseconds << Int64(min(max(self.attempts - 1, 0), 20))
        let capped = min(exponential, self.policy.backoffLimit.nanoseconds)
        return .nanoseconds(Int64.random(in: (capped / 2)...max(capped / 2, capped), using: &random))
    }
}

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

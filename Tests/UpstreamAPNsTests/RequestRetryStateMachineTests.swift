import NIOCore
import Testing
import UpstreamAPNs

/// The retry budget of one request, driven without sockets: time is a number the test moves,
/// the jitter comes from a seeded generator.
@Suite("Request retry state machine")
struct RequestRetryStateMachineTests {
    /// SplitMix64: a deterministic generator for the jitter.
    struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            self.state &+= 0x9E37_79B9_7F4A_7C15
            var z = self.state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// A machine and a fake clock: `now` on the monotonic clock, `unixTime` for expirations.
    struct Driver {
        var machine: RequestRetryStateMachine
        var now: NIODeadline
        var unixTime: Double
        var random = SeededGenerator(state: 42)

        init(budget: TimeAmount = .seconds(30), expiration: UInt32 = 0, unixTime: Double = 1_800_000_000) {
            let policy = RequestRetryStateMachine.Policy(
                budget: budget,
                requestTimeout: .seconds(10),
                backoffBase: .milliseconds(50),
                backoffLimit: .seconds(5)
            )
            self.now = .uptimeNanoseconds(1_000_000_000)
            self.unixTime = unixTime
            self.machine = RequestRetryStateMachine(policy: policy, startedAt: self.now, expiration: expiration)
        }

        mutating func advance(_ amount: TimeAmount) {
            self.now = self.now + amount
            self.unixTime += Double(amount.nanoseconds) / 1e9
        }

        /// Starts an attempt, then answers it `after` later.
        mutating func answer(
            _ status: Int,
            _ reason: APNsReason? = nil,
            after: TimeAmount = .milliseconds(1)
        ) -> RequestRetryStateMachine.Action {
            _ = self.machine.attemptStarted(now: self.now)
            self.advance(after)
            return self.machine.answered(
                APNsResponse(status: status, apnsID: nil, reason: reason),
                now: self.now,
                unixTime: self.unixTime,
                using: &self.random
            )
        }

        mutating func fail(
            _ failure: APNsStreamFailure,
            after: TimeAmount = .milliseconds(1)
        ) -> RequestRetryStateMachine.Action {
            _ = self.machine.attemptStarted(now: self.now)
            self.advance(after)
            return self.machine.failed(failure, now: self.now, unixTime: self.unixTime, using: &self.random)
        }

        /// Follows a retry's delay.
        mutating func wait(_ action: RequestRetryStateMachine.Action) {
            if case .retry(let delay, _) = action { self.advance(delay) }
        }
    }

    static func finished(_ action: RequestRetryStateMachine.Action) -> APNsSendResult? {
        if case .finish(let result) = action { return result }
        return nil
    }

    @Test("A 200, and an error that is not retried, finish at once")
    func finalAnswers() {
        var driver = Driver()
        #expect(Self.finished(driver.answer(200)) == .answered(APNsResponse(status: 200, apnsID: nil)))
        var refused = Driver()
        #expect(
            Self.finished(refused.answer(400, .badDeviceToken))
                == .answered(APNsResponse(status: 400, apnsID: nil, reason: .badDeviceToken))
        )
        #expect(refused.machine.attempts == 1)
    }

    @Test("A stream the server reset with PROTOCOL_ERROR is not tried again, on any connection")
    func refusedRequestIsNotRetried() {
        var driver = Driver()
        let result = Self.finished(driver.fail(.refused("stream reset (PROTOCOL_ERROR)")))
        guard case .unanswered(let failure, nil)? = result else {
            Issue.record("expected an unanswered result, got \(String(describing: result))")
            return
        }
        #expect(failure.kind == .refusedByServer)
        #expect(driver.machine.attempts == 1)
    }

    @Test("429 and 5xx are retried with a doubling backoff in the upper half of each step, capped")
    func backoffDoublesWithJitter() {
        var driver = Driver(budget: .seconds(3600))
        var delays: [TimeAmount] = []
        for _ in 0..<9 {
            let action = driver.answer(503, .serviceUnavailable)
            guard case .retry(let delay, let freshToken) = action else {
                Issue.record("expected a retry, got \(action)")
                return
            }
            #expect(!freshToken)
            delays.append(delay)
            driver.wait(action)
        }
        for (index, delay) in delays.enumerated() {
            let step = min(Int64(50_000_000) << Int64(index), 5_000_000_000)
            #expect(
                delay.nanoseconds >= step / 2 && delay.nanoseconds <= step,
                "attempt \(index + 1): \(delay) within [\(step / 2), \(step)] ns"
            )
        }
        #expect(delays.last == delays.last.map { min($0, .seconds(5)) }, "capped at the limit")
    }

    @Test("The budget ends retries: the last answer is the result (429 stays 429 for the caller)")
    func budgetRunsOut() {
        var driver = Driver(budget: .seconds(2))
        var action = driver.answer(429, .tooManyRequests)
        var attempts = 1
        while case .retry = action {
            driver.wait(action)
            action = driver.answer(429, .tooManyRequests)
            attempts += 1
            if attempts > 100 { break }
        }
        #expect(Self.finished(action) == .answered(APNsResponse(status: 429, apnsID: nil, reason: .tooManyRequests)))
        #expect(attempts > 3 && attempts < 20, "\(attempts) attempts in a 2 s budget with a 50 ms doubling backoff")
    }

    @Test("A notification whose expiration passes before the next attempt is not retried")
    func expirationEndsRetries() {
        var driver = Driver(expiration: 1_800_000_000, unixTime: 1_800_000_000 - 0.01)
        let action = driver.answer(500, .internalServerError, after: .milliseconds(5))
        #expect(
            Self.finished(action) == .answered(APNsResponse(status: 500, apnsID: nil, reason: .internalServerError))
        )
    }

    @Test("ExpiredProviderToken: once more at once with a fresh token; a second refusal is the result")
    func expiredProviderToken() {
        var driver = Driver()
        #expect(driver.answer(403, .expiredProviderToken) == .retry(after: .zero, freshToken: true))
        #expect(
            Self.finished(driver.answer(403, .expiredProviderToken))
                == .answered(APNsResponse(status: 403, apnsID: nil, reason: .expiredProviderToken))
        )
        var throttled = Driver()
        #expect(
            throttled.answer(429, .tooManyProviderTokenUpdates) == .retry(after: .zero, freshToken: false),
            "the same token, not a new one"
        )
        #expect(Self.finished(throttled.answer(429, .tooManyProviderTokenUpdates)) != nil)
    }

    @Test("Unprocessed streams go again at once twice, then with the backoff; interrupted ones with the backoff")
    func streamFailures() {
        var driver = Driver()
        #expect(driver.fail(.unprocessed("GOAWAY")) == .retry(after: .zero, freshToken: false))
        #expect(driver.fail(.unprocessed("GOAWAY")) == .retry(after: .zero, freshToken: false))
        guard case .retry(let third, _) = driver.fail(.unprocessed("GOAWAY")) else {
            Issue.record("expected a retry")
            return
        }
        #expect(third > .zero)
        guard case .retry(let interrupted, _) = driver.fail(.interrupted("reset")) else {
            Issue.record("expected a retry")
            return
        }
        #expect(interrupted > .zero)
    }

    @Test(
        "An attempt's answer deadline counts from its write, not from the queue; one written late keeps its whole timeout"
    )
    func answerDeadlineFromTheWrite() {
        var driver = Driver(budget: .seconds(30))
        let started = driver.now
        let deadlines = driver.machine.attemptStarted(now: started)
        #expect(deadlines.queued == started + .seconds(10), "room must come within the request timeout")
        // Written after 5 s in the queue: still 10 s for the answer.
        #expect(deadlines.answerDeadline(writtenAt: started + .seconds(5)) == started + .seconds(15))
        // Written late in the budget: APNs may answer after the budget's end, and a reset then
        // would report a notification it received as failed.
        #expect(deadlines.answerDeadline(writtenAt: started + .seconds(25)) == started + .seconds(35))
        #expect(deadlines.queued <= started + .seconds(30), "no attempt is written after the budget")
    }

    @Test("Attempts that go unanswered until the budget is gone: unanswered, with the last answer given")
    func unansweredUntilTheBudgetIsGone() {
        var driver = Driver(budget: .seconds(25))
        var action = driver.answer(429, .tooManyRequests)
        driver.wait(action)
        // Each later attempt times out after its 10 s request timeout.
        var deadlines: [NIODeadline] = []
        var lastWrite = driver.now
        repeat {
            lastWrite = driver.now
            let deadline = driver.machine.attemptStarted(now: driver.now).answerDeadline(writtenAt: driver.now)
            deadlines.append(deadline)
            driver.now = deadline
            action = driver.machine.failed(
                .interrupted("timed out"),
                now: driver.now,
                unixTime: driver.unixTime,
                using: &driver.random
            )
            driver.wait(action)
        } while Self.finished(action) == nil && deadlines.count < 10
        guard case .unanswered(let failure, let lastResponse)? = Self.finished(action) else {
            Issue.record("expected unanswered, got \(action)")
            return
        }
        #expect(failure.kind == .retryBudgetExhausted)
        #expect(lastResponse?.status == 429)
        let budgetEnd = NIODeadline.uptimeNanoseconds(1_000_000_000) + .seconds(25)
        #expect(lastWrite < budgetEnd, "the last attempt was written within the budget")
        #expect(
            deadlines.last == lastWrite + .seconds(10) && deadlines.last! > budgetEnd,
            "the last attempt waits its own timeout, past the budget's end"
        )
    }

    @Test(
        "How each answer is treated",
        arguments: [
            (200, nil, RequestRetryStateMachine.AnswerClass.final),
            (400, "BadDeviceToken", .final),
            (410, "Unregistered", .final),
            (403, "InvalidProviderToken", .final),
            (403, "ExpiredProviderToken", .retryOnce(freshToken: true)),
            (429, "TooManyProviderTokenUpdates", .retryOnce(freshToken: false)),
            (400, "IdleTimeout", .retryOnce(freshToken: false)),
            (429, "TooManyRequests", .temporary),
            (500, "InternalServerError", .temporary),
            (503, "Shutdown", .temporary),
            (502, nil, .temporary),
        ] as [(Int, String?, RequestRetryStateMachine.AnswerClass)]
    )
    func answerClasses(status: Int, reason: String?, expected: RequestRetryStateMachine.AnswerClass) {
        #expect(
            RequestRetryStateMachine.AnswerClass(
                APNsResponse(status: status, apnsID: nil, reason: reason.map(APNsReason.init))
            ) == expected
        )
    }
}

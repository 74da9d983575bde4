import NIOCore
import Synchronization

/// Scripted behaviours of a ``MockAPNsServer``: the faults and answers a test (or an operator
/// staging a migration) asks for. Every method may be called at any time, from any thread; a
/// change applies to the requests that arrive after it.
package final class MockAPNsScript: Sendable {
    struct FailureRule {
        var token: String?
        var remaining: Int
        var status: Int
        var reason: MockAPNsReason
    }

    struct State {
        var unregistered: [String: UInt64] = [:]
        var unregistersEveryToken: UInt64?
        var badTokens: Set<String> = []
        var failures: [FailureRule] = []
        var goAwayEvery: Int?
        var goAwayReason: MockAPNsReason = .shutdown
        var responseDelay: TimeAmount = .zero
        var refuseNext = 0
        var dropConnectionAfter: Int?
        var ignoresPings = false
    }

    let state = Mutex(State())

    package init() {}

    /// Answers `410 Unregistered` for this token (lowercase hex), with this timestamp
    /// (milliseconds since 1970).
    package func unregister(token: String, atMilliseconds timestamp: UInt64) {
        self.state.withLock { $0.unregistered[token.lowercased()] = timestamp }
    }

    /// Answers `410 Unregistered` for every token not scripted otherwise (`nil` stops it).
    package func unregisterEveryToken(atMilliseconds timestamp: UInt64?) {
        self.state.withLock { $0.unregistersEveryToken = timestamp }
    }

    /// Answers 200 again for this token (the device registered again).
    package func reregister(token: String) {
        self.state.withLock { _ = $0.unregistered.removeValue(forKey: token.lowercased()) }
    }

    /// Answers `400 BadDeviceToken` for this token (lowercase hex).
    package func rejectAsBadToken(_ token: String) {
        self.state.withLock { _ = $0.badTokens.insert(token.lowercased()) }
    }

    /// Answers the next `count` requests (for `token` only, when given) with this status and
    /// reason, then succeeds again: `fail(2, status: 503, reason: .serviceUnavailable)`. A rule
    /// without a token or channel applies to every API's requests.
    package func fail(_ count: Int, status: Int, reason: MockAPNsReason, token: String? = nil) {
        self.state.withLock {
            $0.failures.append(
                FailureRule(token: token?.lowercased(), remaining: count, status: status, reason: reason)
            )
        }
    }

    /// The same for broadcasts to one channel (its base64 id): `fail(1, status: 400,
    /// reason: .featureNotEnabled, channel: id)`.
    package func fail(_ count: Int, status: Int, reason: MockAPNsReason, channel: String) {
        self.state.withLock {
            $0.failures.append(
                FailureRule(token: "channel:" + channel, remaining: count, status: status, reason: reason)
            )
        }
    }

    /// Sends GOAWAY (with this reason in its JSON debug data) on every connection's `k`-th
    /// request, whose `lastStreamID` leaves that request and every later one unprocessed.
    package func goAway(every k: Int?, reason: MockAPNsReason = .shutdown) {
        self.state.withLock {
            $0.goAwayEvery = k
            $0.goAwayReason = reason
        }
    }

    /// Delays every answer by this much.
    package func delayResponses(by delay: TimeAmount) {
        self.state.withLock { $0.responseDelay = delay }
    }

    /// Resets the next `count` streams with `REFUSED_STREAM`, unprocessed.
    package func refuseStreams(_ count: Int) {
        self.state.withLock { $0.refuseNext += count }
    }

    /// Drops each connection (TCP close, no GOAWAY) when its `k`-th request arrives, unanswered.
    package func dropConnections(after k: Int?) {
        self.state.withLock { $0.dropConnectionAfter = k }
    }

    /// Stops (or resumes) answering PINGs; everything else is still served.
    package func ignorePings(_ ignore: Bool) {
        self.state.withLock { $0.ignoresPings = ignore }
    }

    var ignoresPings: Bool { self.state.withLock { $0.ignoresPings } }

    /// What the script says about the next request, before it is validated; takes one
    /// refused stream from the budget when there is one.
    func behaviourForNextRequest() -> (
        goAwayEvery: Int?, goAwayReason: MockAPNsReason, refuse: Bool, drop: Int?, delay: TimeAmount
    ) {
        self.state.withLock { state in
            let refuse = state.refuseNext > 0
            if refuse { state.refuseNext -= 1 }
            return (state.goAwayEvery, state.goAwayReason, refuse, state.dropConnectionAfter, state.responseDelay)
        }
    }

    /// The scripted answer for one request that passed validation, if any.
    /// For a broadcast or channel management request, `token` is the channel id (or empty), and
    /// only failure rules apply.
    func scriptedAnswer(
        token: String,
        broadcast: Bool = false
    ) -> (status: Int, reason: MockAPNsReason, timestamp: UInt64?)? {
        let target = broadcast ? "channel:" + token : token
        return self.state.withLock { state in
            if let index = state.failures.firstIndex(where: {
                $0.remaining > 0 && ($0.token == nil || $0.token == target)
            }) {
                state.failures[index].remaining -= 1
                let rule = state.failures[index]
                if rule.remaining == 0 { state.failures.remove(at: index) }
                return (rule.status, rule.reason, nil)
            }
            if broadcast { return nil }
            if let timestamp = state.unregistered[token] {
                return (410, .unregistered, timestamp)
            }
            if state.badTokens.contains(token) {
                return (400, .badDeviceToken, nil)
            }
            if let timestamp = state.unregistersEveryToken {
                return (410, .unregistered, timestamp)
            }
            return nil
        }
    }
}

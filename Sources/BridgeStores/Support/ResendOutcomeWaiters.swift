import Synchronization

/// Claims waiting for the outcome of a pending resend record (docs/protocol.md#resend-records).
/// A claim sleeps until this process writes that outcome (``wake(_:)``, from the store's
/// `resolve`) or until its next check of the store, whichever comes first: an outcome another
/// instance writes is seen at that check. So a waiting claim costs a query per check, not one
/// every 20 ms.
final class ResendOutcomeWaiters: Sendable {
    private struct Waiter {
        var token: UInt64
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var waiters: [Int64: [Waiter]] = [:]
        /// Waits begun and not registered yet, and those of them cancelled meanwhile.
        var unregistered: Set<UInt64> = []
        var cancelled: Set<UInt64> = []
        var nextToken: UInt64 = 0
    }

    private let state = Mutex(State())

    /// Before a waiting claim's next check of record `id`: returns when this process wrote its
    /// outcome, or when the check is due (20 ms after the claim started waiting, then twice as
    /// long each time, at most `limit`), and counts the check.
    func waitBeforeCheck(of id: Int64, checks: inout Int, limit: Duration) async {
        await self.wait(for: id, atMost: Self.checkInterval(afterChecks: checks, limit: limit))
        checks += 1
    }

    /// Returns when record `id`'s outcome was written by this process, or after `timeout`.
    private func wait(for id: Int64, atMost timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await Task.sleep(for: timeout) }
            group.addTask { await self.waitForWake(id) }
            await group.next()
            group.cancelAll()
        }
    }

    /// Wakes the claims waiting for record `id`.
    func wake(_ id: Int64) {
        let woken = self.state.withLock { $0.waiters.removeValue(forKey: id) ?? [] }
        for waiter in woken { waiter.continuation.resume() }
    }

    private static func checkInterval(afterChecks checks: Int, limit: Duration) -> Duration {
        min(limit, .milliseconds(20 << min(checks, 10)))
    }

    private func waitForWake(_ id: Int64) async {
        let token = self.state.withLock { state -> UInt64 in
            defer { state.nextToken += 1 }
            state.unregistered.insert(state.nextToken)
            return state.nextToken
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = self.state.withLock { state -> Bool in
                    state.unregistered.remove(token)
                    if state.cancelled.remove(token) != nil { return true }
                    state.waiters[id, default: []].append(Waiter(token: token, continuation: continuation))
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = self.state.withLock { state -> Waiter? in
                guard let index = state.waiters[id]?.firstIndex(where: { $0.token == token }) else {
                    // Not registered yet: it resumes as it registers. Already woken: nothing to do.
                    if state.unregistered.contains(token) { state.cancelled.insert(token) }
                    return nil
                }
                let waiter = state.waiters[id]!.remove(at: index)
                if state.waiters[id]!.isEmpty { state.waiters[id] = nil }
                return waiter
            }
            waiter?.continuation.resume()
        }
    }
}

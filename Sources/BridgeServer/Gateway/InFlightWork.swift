import NIOCore
import Synchronization

/// Counts what the gateway has started and not finished, across all its connections: forwarded
/// notifications and the store writes their outcomes cause. A connection may be closed while
/// its notifications are still in flight (the provider wrote and closed, or a farewell was
/// said); graceful shutdown waits for this count to reach zero before the upstream client and
/// the store close, so that no outcome, resend record or feedback entry is cut off.
package final class InFlightWork: Sendable {
    private struct State {
        var count = 0
        var nextWaiter = 0
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
    }

    private let state = Mutex(State())

    package init() {}

    package var count: Int {
        self.state.withLock { $0.count }
    }

    package func started() {
        self.state.withLock { $0.count += 1 }
    }

    package func finished() {
        let waiters: [CheckedContinuation<Void, Never>] = self.state.withLock { state in
            state.count -= 1
            precondition(state.count >= 0, "more work finished than started")
            guard state.count == 0 else { return [] }
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Tracks the future's work until it completes.
    func track<Value>(_ future: EventLoopFuture<Value>) {
        self.started()
        future.whenComplete { _ in self.finished() }
    }

    /// Returns when nothing is in flight, or after `timeout`.
    /// - Returns: whether nothing is in flight.
    @discardableResult
    package func waitUntilIdle(timeout: Duration) async -> Bool {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitUntilIdle() }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
        return self.count == 0
    }

    /// Returns when nothing is in flight, or when the task is cancelled.
    private func waitUntilIdle() async {
        let id = self.state.withLock { state in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = self.state.withLock { state in
                    if state.count == 0 || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = self.state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resume()
        }
    }
}

import Synchronization

/// A lock for async code: one body at a time, in arrival order, across suspension points.
///
/// An SQLite connection runs each statement on a thread pool; a transaction is several
/// statements, so its users take turns through this lock. Configuration reloads take turns
/// through one too (a reload awaits, and an actor lets the next one in meanwhile), and so do
/// the tests' PostgreSQL outages (`PostgresCluster.oneOutageAtATime`).
package final class AsyncSerialLock: Sendable {
    private struct State {
        var isLocked = false
        var waiters: [CheckedContinuation<Void, Never>] = []  // few: the store's own tasks
    }

    private let state = Mutex(State())

    package init() {}

    package func withLock<Result>(
        isolation: isolated (any Actor)? = #isolation,
        _ body: () async throws -> Result
    ) async rethrows -> Result {
        await self.lock()
        defer { self.unlock() }
        return try await body()
    }

    private func lock() async {
        let acquired = self.state.withLock { state in
            guard state.isLocked else {
                state.isLocked = true
                return true
            }
            return false
        }
        if acquired { return }
        await withCheckedContinuation { continuation in
            let acquiredNow = self.state.withLock { state in
                if state.isLocked {
                    state.waiters.append(continuation)
                    return false
                }
                state.isLocked = true
                return true
            }
            if acquiredNow { continuation.resume() }
        }
    }

    private func unlock() {
        let next = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
            if !state.waiters.isEmpty {
                let next = state.waiters.removeFirst()
                return next  // ownership passes straight to the next waiter
            }
            state.isLocked = false
            return nil
        }
        next?.resume()
    }
}

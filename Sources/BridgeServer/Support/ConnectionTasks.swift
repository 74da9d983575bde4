import NIOCore
import Synchronization

/// The async work a listener's connections start (the client-certificate check during a TLS
/// handshake, a feedback drain): each job runs as a child task of the listener's `run()`, never
/// as a task of its own, so nothing a connection started outlives its listener.
///
/// Every job ``start(_:)`` accepts runs exactly once: by ``run()``, or, when nothing runs it, by
/// ``finish()``. After ``finish()`` nothing more is accepted.
package final class ConnectionTasks: Sendable {
    package typealias Job = @Sendable () async -> Void

    private enum Runner {
        case notStarted
        case running
        case ended
    }

    private struct State {
        var queued = CircularBuffer<Job>()
        /// `run()` waiting for the next job.
        var idleRunner: CheckedContinuation<Job?, Never>?
        var finished = false
        var runner = Runner.notStarted
        /// `finish()` calls waiting for `run()` to end.
        var endWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    package init() {}

    /// Hands `job` to ``run()``; `false` (and the job is not run) once ``finish()`` was called.
    package func start(_ job: @escaping Job) -> Bool {
        enum Next {
            case refused
            case queued
            case wake(CheckedContinuation<Job?, Never>)
        }
        let next: Next = self.state.withLock { state in
            guard !state.finished else { return .refused }
            if let runner = state.idleRunner {
                state.idleRunner = nil
                return .wake(runner)
            }
            state.queued.append(job)
            return .queued
        }
        switch next {
        case .refused:
            return false
        case .queued:
            return true
        case .wake(let runner):
            runner.resume(returning: job)
            return true
        }
    }

    /// Runs each job started, as a child task, until ``finish()``; returns when the last one has
    /// ended. Call it once. It does not end at cancellation (the jobs inherit it): only
    /// ``finish()`` ends it, so that no accepted job is dropped.
    package func run() async {
        let first = self.state.withLock { state in
            guard case .notStarted = state.runner else { return false }
            state.runner = .running
            return true
        }
        precondition(first, "ConnectionTasks.run() is called once")
        await withDiscardingTaskGroup { group in
            while let job = await self.next() {
                group.addTask(operation: job)
            }
        }
        let waiters = self.state.withLock { state in
            state.runner = .ended
            defer { state.endWaiters = [] }
            return state.endWaiters
        }
        for waiter in waiters {
            waiter.resume()
        }
    }

    private func next() async -> Job? {
        await withCheckedContinuation { continuation in
            let ready: Job?? = self.state.withLock { state in
                if let job = state.queued.popFirst() { return .some(job) }
                if state.finished { return .some(nil) }
                state.idleRunner = continuation
                return .none
            }
            if let ready {
                continuation.resume(returning: ready)
            }
        }
    }

    /// Accepts nothing more, and returns when every job accepted has ended: run by ``run()``,
    /// or here when no ``run()`` has started.
    package func finish() async {
        enum Then {
            case wait
            case runHere([Job])
            case done
        }
        let (idleRunner, then): (CheckedContinuation<Job?, Never>?, Then) = self.state.withLock { state in
            state.finished = true
            let idleRunner = state.idleRunner
            state.idleRunner = nil
            switch state.runner {
            case .notStarted:
                let jobs = Array(state.queued)
                state.queued.removeAll()
                return (idleRunner, .runHere(jobs))
            case .running:
                return (idleRunner, .wait)
            case .ended:
                return (idleRunner, .done)
            }
        }
        idleRunner?.resume(returning: nil)
        switch then {
        case .done:
            return
        case .runHere(let jobs):
            await withDiscardingTaskGroup { group in
                for job in jobs {
                    group.addTask(operation: job)
                }
            }
        case .wait:
            await withCheckedContinuation { continuation in
                let ended = self.state.withLock { state in
                    if case .ended = state.runner { return true }
                    state.endWaiters.append(continuation)
                    return false
                }
                if ended {
                    continuation.resume()
                }
            }
        }
    }
}

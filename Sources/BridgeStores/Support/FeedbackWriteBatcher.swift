import BridgeCore
import NIOCore
import Synchronization

/// Group commit for feedback changes.
///
/// The gateway produces one change per upstream answer (a 410 records, a 200 removes). Changes
/// that arrive while a commit is running wait and go into the next transaction together, so
/// the number of commits adapts to the load rather than to the number of answers. Within a
/// batch the last change per (tenant, environment, token) wins, except that of two 410s the
/// later timestamp is kept. Each caller's future completes when the batch holding its change
/// has committed.
///
/// A 200 for a token that ``FeedbackListFilter`` says is on no list is not queued at all: its
/// future succeeds at once (docs/feedback.md#on-the-list). A 410's token goes into the filter when it is
/// submitted (so that a 200 right after it is not skipped) and again when it has committed (so
/// that a rebuild of the filter running meanwhile keeps it).
///
/// The commits run in ``run()``, which the store runs as background work for as long as it is
/// open (a child task of its scope in the bridge): a change that finds no commit running wakes it.
///
/// A commit that fails (the store is briefly gone: a PostgreSQL restart, a locked SQLite file)
/// is not dropped: its changes go back into the queue, under any later change to the same key,
/// and are committed again after a pause (``StoreHealth``), so every 410 reaches its list once.
/// The queue's bound holds meanwhile. Only a store that is closing gives up, after a few more
/// attempts.
final class FeedbackWriteBatcher: Sendable {
    struct QueuedChange {
        var change: FeedbackChange
        var promises: [EventLoopPromise<Void>]
    }

    /// One transaction's worth: keys are distinct.
    struct Batch {
        var entries: [FeedbackEntry] = []
        var removals: [FeedbackKey] = []

        init(_ changes: [FeedbackChange]) {
            for change in changes {
                switch change {
                case .unregistered(let entry): self.entries.append(entry)
                case .registered(let key): self.removals.append(key)
                }
            }
        }
    }

    private struct State {
        var queued: [FeedbackKey: QueuedChange] = [:]
        var isCommitting = false
        var isClosed = false
        /// ``close()`` callers waiting for the last commit.
        var closeWaiters: [CheckedContinuation<Void, Never>] = []
    }

    struct QueueFull: Error, CustomStringConvertible {
        var limit: Int
        var description: String { "feedback store queue full (\(self.limit) changes waiting for a commit)" }
    }

    struct StoreClosed: Error, CustomStringConvertible {
        var description: String { "the store is closed" }
    }

    private let state = Mutex(State())
    /// Wakes ``run()``; wake-ups while a commit runs are coalesced into one.
    private let wake: AsyncStream<Void>
    private let wakeContinuation: AsyncStream<Void>.Continuation
    private let maximumQueued: Int
    private let filter: FeedbackListFilter
    private let health: StoreHealth
    private let commit: @Sendable (Batch) async throws -> Void

    /// - Parameters:
    ///   - filter: the store's filter of the tokens that may be on a list.
    ///   - commit: stores a batch in one transaction.
    /// Attempts a closing store still makes at a batch that keeps failing.
    static let attemptsWhileClosing = 5

    init(
        maximumQueued: Int,
        filter: FeedbackListFilter,
        health: StoreHealth,
        commit: @escaping @Sendable (Batch) async throws -> Void
    ) {
        self.maximumQueued = maximumQueued
        self.filter = filter
        self.health = health
        self.commit = commit
        (self.wake, self.wakeContinuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Commits whenever a change arrives, until ``finish()``.
    func run() async {
        for await _ in self.wake {
            await self.commitUntilEmpty()
        }
    }

    /// Ends ``run()`` (after ``close()``: nothing is queued any more).
    func finish() {
        self.wakeContinuation.finish()
    }

    func submit(_ change: FeedbackChange, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        switch change {
        case .registered(let key):
            guard self.filter.mayContain(key.deviceToken, on: key.list) else {
                return eventLoop.makeSucceededVoidFuture()
            }
        case .unregistered(let entry):
            self.filter.insert(entry.deviceToken, on: entry.key.list)
        }
        var change = change
        var key = change.key
        key.deviceToken = ByteBuffer(buffer: key.deviceToken)  // do not pin the connection's read buffer
        if case .unregistered(var entry) = change {
            entry.deviceToken = key.deviceToken
            change = .unregistered(entry)
        } else {
            change = .registered(key)
        }
        let promise = eventLoop.makePromise(of: Void.self)
        enum Decision {
            case refuse(any Error)
            case queued, startCommitting
        }
        let decision: Decision = self.state.withLock { state in
            if state.isClosed { return .refuse(StoreClosed()) }
            if var existing = state.queued[key] {
                existing.change = Self.merge(existing.change, change)
                existing.promises.append(promise)
                state.queued[key] = existing
            } else {
                guard state.queued.count < self.maximumQueued else {
                    return .refuse(QueueFull(limit: self.maximumQueued))
                }
                state.queued[key] = QueuedChange(change: change, promises: [promise])
            }
            if state.isCommitting { return .queued }
            state.isCommitting = true
            return .startCommitting
        }
        switch decision {
        case .refuse(let error):
            promise.fail(error)
        case .queued:
            break
        case .startCommitting:
            self.wakeContinuation.yield()
        }
        return promise.futureResult
    }

    /// Commits what is queued now; returns when nothing is queued or being committed.
    func close() async {
        await withCheckedContinuation { continuation in
            let idle = self.state.withLock { state in
                state.isClosed = true
                if state.isCommitting {
                    state.closeWaiters.append(continuation)
                    return false
                }
                return true
            }
            if idle { continuation.resume() }
        }
    }

    private func commitUntilEmpty() async {
        var failures = 0
        var failuresWhileClosing = 0
        while true {
            let (batch, closeWaiters) = self.state.withLock {
                state -> ([QueuedChange], [CheckedContinuation<Void, Never>]) in
                let batch = Array(state.queued.values)
                state.queued.removeAll(keepingCapacity: true)
                guard batch.isEmpty else { return (batch, []) }
                state.isCommitting = false
                defer { state.closeWaiters = [] }
                return ([], state.closeWaiters)
            }
            if batch.isEmpty {
                for waiter in closeWaiters { waiter.resume() }
                return
            }
            do {
                let committed = Batch(batch.map(\.change))
                try await self.commit(committed)
                failures = 0
                self.health.succeeded()
                self.health.feedbackChangesWaiting(0)
                for entry in committed.entries {
                    self.filter.insert(entry.deviceToken, on: entry.key.list)
                }
                for queued in batch {
                    for promise in queued.promises { promise.succeed() }
                }
            } catch {
                self.health.failed("feedback commit", error)
                failures += 1
                let (givingUp, waiting) = self.state.withLock { state -> (Bool, Int) in
                    if state.isClosed { failuresWhileClosing += 1 }
                    if failuresWhileClosing > Self.attemptsWhileClosing || Task.isCancelled {
                        return (true, state.queued.count)
                    }
                    // Back into the queue, under what came since: a later change to the same
                    // key wins, and every caller still waits for the commit that holds it.
                    for queued in batch {
                        let key = queued.change.key
                        if var later = state.queued[key] {
                            later.change = Self.merge(queued.change, later.change)
                            later.promises = queued.promises + later.promises
                            state.queued[key] = later
                        } else {
                            state.queued[key] = queued
                        }
                    }
                    return (false, state.queued.count)
                }
                self.health.feedbackChangesWaiting(waiting)
                if givingUp {
                    for queued in batch {
                        for promise in queued.promises { promise.fail(error) }
                    }
                } else {
                    try? await Task.sleep(for: StoreHealth.pause(afterFailures: failures))
                }
            }
        }
    }

    private static func merge(_ earlier: FeedbackChange, _ later: FeedbackChange) -> FeedbackChange {
        if case .unregistered(let first) = earlier, case .unregistered(let second) = later,
            first.timestamp > second.timestamp
        {
            return earlier
        }
        return later
    }
}

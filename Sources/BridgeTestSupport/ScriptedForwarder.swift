import BridgeCore
import LegacyClient
import NIOCore
import Synchronization

/// A forwarder for gateway tests: it answers each notification as a script says, after an
/// optional delay, and keeps a ledger of everything it received, in arrival order.
package final class ScriptedForwarder: NotificationForwarder {
    package struct Reply: Sendable {
        package var outcome: NotificationOutcome
        package var delay: TimeAmount
        /// When set, the answer waits for this future (the test decides when), then `delay`.
        package var gate: EventLoopFuture<Void>?

        package init(_ outcome: NotificationOutcome, after delay: TimeAmount = .zero) {
            self.outcome = outcome
            self.delay = delay
        }

        /// An answer held until `gate` completes.
        package init(_ outcome: NotificationOutcome, when gate: EventLoopFuture<Void>) {
            self.outcome = outcome
            self.delay = .zero
            self.gate = gate
        }
    }

    package typealias Script = @Sendable (_ notification: ForwardedNotification, _ arrival: Int) -> Reply

    private struct State {
        var ledger: [ForwardedNotification] = []
        var waiters: [(count: Int, promise: EventLoopPromise<Void>)] = []
    }

    private let script: Script
    private let state = Mutex(State())

    package init(script: @escaping Script = { _, _ in Reply(.accepted) }) {
        self.script = script
    }

    /// Everything received so far, in arrival order.
    package var ledger: [ForwardedNotification] {
        self.state.withLock { $0.ledger }
    }

    package func send(
        _ notification: ForwardedNotification,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (NotificationOutcome) -> Void
    ) {
        let (arrival, ready): (Int, [EventLoopPromise<Void>]) = self.state.withLock { state in
            state.ledger.append(notification)
            let count = state.ledger.count
            let ready = state.waiters.filter { $0.count <= count }.map(\.promise)
            state.waiters.removeAll { $0.count <= count }
            return (count - 1, ready)
        }
        for promise in ready { promise.succeed() }
        let reply = self.script(notification, arrival)
        if let gate = reply.gate {
            gate.hop(to: eventLoop).whenSuccess { completion(reply.outcome) }
        } else if reply.delay == .zero {
            completion(reply.outcome)
        } else {
            eventLoop.scheduleTask(in: reply.delay) { completion(reply.outcome) }
        }
    }

    /// Completes when the ledger holds at least `count` notifications, or fails after `timeout`.
    package func waitForLedgerCount(
        _ count: Int,
        timeout: TimeAmount = .seconds(10),
        on eventLoop: any EventLoop
    ) async throws {
        let promise = eventLoop.makePromise(of: Void.self)
        let alreadyThere = self.state.withLock { state in
            if state.ledger.count >= count { return true }
            state.waiters.append((count, promise))
            return false
        }
        if alreadyThere { promise.succeed() }
        let timer = eventLoop.scheduleTask(in: timeout) {
            promise.fail(TimedOut(what: "ledger count \(count)"))
        }
        defer { timer.cancel() }
        try await promise.futureResult.get()
    }
}

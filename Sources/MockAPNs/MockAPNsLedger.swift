import NIOCore
import NIOHPACK
import Synchronization

/// What a ``MockAPNsServer`` received: for tests, benchmarks and operators.
public final class MockAPNsLedger: Sendable {
    public struct Counters: Sendable, Hashable {
        /// Requests received whole, answered or not (the script's refusals, drops and delays
        /// included; not those that arrive after a GOAWAY).
        public var received = 0
        /// Requests answered, by any status.
        public var answered = 0
        /// Requests answered 200.
        public var accepted = 0
        /// Streams reset with REFUSED_STREAM.
        public var refused = 0
        /// Requests left unprocessed by a GOAWAY.
        public var unprocessed = 0
        /// GOAWAY frames sent.
        public var goAways = 0
        /// Connections dropped by script.
        public var dropped = 0
        public var connectionsAccepted = 0
        public var pingsReceived = 0
        public var pingsIgnored = 0
        /// New streams opened while the acknowledged `MAX_CONCURRENT_STREAMS` was reached.
        public var streamLimitViolations = 0
        /// The most streams open at once on one connection.
        public var maximumOpenStreams = 0
    }

    private struct State {
        var records: [MockAPNsRequestRecord] = []
        var counters = Counters()
        /// Callers of the `waitFor…` methods, resumed by the change that makes their condition
        /// hold (or by their timeout).
        var waiters: [Int: Waiter] = [:]
        var nextWaiterID = 0

        /// Takes out the waiters whose condition now holds.
        mutating func satisfiedWaiters() -> [CheckedContinuation<Bool, Never>] {
            guard !self.waiters.isEmpty else { return [] }
            var satisfied: [CheckedContinuation<Bool, Never>] = []
            for (id, waiter) in self.waiters where waiter.condition(self.records, self.counters) {
                satisfied.append(waiter.continuation)
                self.waiters[id] = nil
            }
            return satisfied
        }
    }

    private struct Waiter {
        var condition: @Sendable ([MockAPNsRequestRecord], Counters) -> Bool
        var continuation: CheckedContinuation<Bool, Never>
    }

    private let state = Mutex(State())
    private let keepsRecords: Bool
    private let onAnswer: (@Sendable (MockAPNsRequestRecord) -> Void)?

    init(keepsRecords: Bool, onAnswer: (@Sendable (MockAPNsRequestRecord) -> Void)? = nil) {
        self.keepsRecords = keepsRecords
        self.onAnswer = onAnswer
    }

    public var records: [MockAPNsRequestRecord] { self.state.withLock { $0.records } }
    public var accepted: [MockAPNsRequestRecord] { self.state.withLock { $0.records.filter(\.wasAccepted) } }
    public var counters: Counters { self.state.withLock { $0.counters } }

    /// Waits until at least `count` requests were accepted (answered 200), or the timeout;
    /// returns whether the count was reached.
    public func waitForAccepted(_ count: Int, timeout: Duration = .seconds(30)) async -> Bool {
        await self.wait(timeout: timeout) { _, counters in counters.accepted >= count }
    }

    /// Waits until at least `count` requests were received (answered or not), or the timeout;
    /// returns whether the count was reached.
    public func waitForReceived(_ count: Int, timeout: Duration = .seconds(30)) async -> Bool {
        await self.wait(timeout: timeout) { _, counters in counters.received >= count }
    }

    /// Waits until the kept records satisfy `condition`, or the timeout; returns whether they
    /// did. `condition` is checked now and after each change, under the ledger's lock: it must
    /// be quick.
    public func waitForRecords(
        timeout: Duration = .seconds(30),
        where condition: @escaping @Sendable ([MockAPNsRequestRecord]) -> Bool
    ) async -> Bool {
        await self.wait(timeout: timeout) { records, _ in condition(records) }
    }

    /// Waits until `condition` holds, checked now and after every change to the ledger (no
    /// polling), or until `timeout` has passed, or the task is cancelled.
    private func wait(
        timeout: Duration,
        until condition: @escaping @Sendable ([MockAPNsRequestRecord], Counters) -> Bool
    ) async -> Bool {
        let id = self.state.withLock { state in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        return await withTaskGroup(of: Bool?.self) { group in
            group.addTask {
                await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in
                        let holdsNow = self.state.withLock { state in
                            // Checked under the lock: a cancellation either came before (seen
                            // here) or finds the waiter registered.
                            if Task.isCancelled || condition(state.records, state.counters) { return true }
                            state.waiters[id] = Waiter(condition: condition, continuation: continuation)
                            return false
                        }
                        if holdsNow {
                            continuation.resume(returning: !Task.isCancelled)
                        }
                    }
                } onCancel: {
                    self.state.withLock { $0.waiters.removeValue(forKey: id) }?.continuation.resume(returning: false)
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return nil  // the timeout: the waiter is cancelled, and answers false
            }
            let first: Bool? = await group.next() ?? nil
            group.cancelAll()
            if let first { return first }
            let waiter: Bool? = await group.next() ?? nil
            return waiter ?? false
        }
    }

    func record(_ record: MockAPNsRequestRecord) {
        self.onAnswer?(record)
        let satisfied = self.state.withLock { state in
            state.counters.answered += 1
            if record.wasAccepted { state.counters.accepted += 1 }
            if self.keepsRecords { state.records.append(record) }
            return state.satisfiedWaiters()
        }
        for continuation in satisfied { continuation.resume(returning: true) }
    }

    func count(_ update: (inout Counters) -> Void) {
        let satisfied = self.state.withLock { state in
            update(&state.counters)
            return state.satisfiedWaiters()
        }
        for continuation in satisfied { continuation.resume(returning: true) }
    }

    /// Forgets every record and counter.
    public func reset() {
        let satisfied = self.state.withLock { state in
            state.records.removeAll()
            state.counters = Counters()
            return state.satisfiedWaiters()
        }
        for continuation in satisfied { continuation.resume(returning: true) }
    }
}

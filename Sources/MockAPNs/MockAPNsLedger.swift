import NIOCore
import NIOHPACK
import Synchronization

/// What a ``MockAPNsServer`` received: for tests, benchmarks and operators.
package final class MockAPNsLedger: Sendable {
    package struct Counters: Sendable, Hashable {
        /// Requests received whole, answered or not (the script's refusals, drops and delays
        /// included; not those that arrive after a GOAWAY).
        package var received = 0
        /// Requests answered, by any status.
        package var answered = 0
        /// Requests answered 200.
        package var accepted = 0
        /// Streams reset with REFUSED_STREAM.
        package var refused = 0
        /// Requests left unprocessed by a GOAWAY.
        package var unprocessed = 0
        /// GOAWAY frames sent.
        package var goAways = 0
        /// Connections dropped by script.
        package var dropped = 0
        package var connectionsAccepted = 0
        package var pingsReceived = 0
        package var pingsIgnored = 0
        /// New streams opened while the acknowledged `MAX_CONCURRENT_STREAMS` was reached.
        package var streamLimitViolations = 0
        /// The most streams open at once on one connection.
        package var maximumOpenStreams = 0
    }

    private struct State {
        var records: [MockAPNsRequestRecord] = []
        var counters = Counters()
    }

    private let state = Mutex(State())
    private let keepsRecords: Bool
    private let onAnswer: (@Sendable (MockAPNsRequestRecord) -> Void)?

    init(keepsRecords: Bool, onAnswer: (@Sendable (MockAPNsRequestRecord) -> Void)? = nil) {
        self.keepsRecords = keepsRecords
        self.onAnswer = onAnswer
    }

    package var records: [MockAPNsRequestRecord] { self.state.withLock { $0.records } }
    package var accepted: [MockAPNsRequestRecord] { self.state.withLock { $0.records.filter(\.wasAccepted) } }
    package var counters: Counters { self.state.withLock { $0.counters } }

    /// Waits until at least `count` requests were accepted (answered 200), or the timeout;
    /// returns whether the count was reached.
    package func waitForAccepted(_ count: Int, timeout: Duration = .seconds(30)) async -> Bool {
        await self.wait(timeout: timeout) { self.counters.accepted >= count }
    }

    /// Waits until at least `count` requests were received (answered or not), or the timeout;
    /// returns whether the count was reached.
    package func waitForReceived(_ count: Int, timeout: Duration = .seconds(30)) async -> Bool {
        await self.wait(timeout: timeout) { self.counters.received >= count }
    }

    /// Waits until the kept records satisfy `condition`, or the timeout; returns whether they
    /// did.
    package func waitForRecords(
        timeout: Duration = .seconds(30),
        where condition: ([MockAPNsRequestRecord]) -> Bool
    ) async -> Bool {
        await self.wait(timeout: timeout) { condition(self.records) }
    }

    /// Checks `condition` every 5 ms until it holds or `timeout` has passed. Polled, on purpose:
    /// checking a condition after every record, on the mock's event loop, cost a test that scans
    /// all records O(n²) on loops other tests share, and their connections timed out.
    private func wait(timeout: Duration, until condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !condition() {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return true
    }

    func record(_ record: MockAPNsRequestRecord) {
        self.onAnswer?(record)
        self.state.withLock { state in
            state.counters.answered += 1
            if record.wasAccepted { state.counters.accepted += 1 }
            if self.keepsRecords { state.records.append(record) }
        }
    }

    func count(_ update: (inout Counters) -> Void) {
        self.state.withLock { update(&$0.counters) }
    }

    /// Forgets every record and counter.
    package func reset() {
        self.state.withLock {
            $0.records.removeAll()
            $0.counters = Counters()
        }
    }
}

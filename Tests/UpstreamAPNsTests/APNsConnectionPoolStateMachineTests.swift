import NIOCore
import Testing
import UpstreamAPNs

/// The pool's decisions, driven without sockets: connections and requests are numbers, time a
/// value, the backoff's jitter a seeded generator.
@Suite("Connection pool state machine")
struct APNsConnectionPoolStateMachineTests {
    typealias Machine = APNsConnectionPoolStateMachine<Int, Int>

    static let now = NIODeadline.uptimeNanoseconds(1_000_000_000)

    struct Pool {
        var machine: Machine
        var random = RequestRetryStateMachineTests.SeededGenerator(state: 7)

        init(size: Int = 2, maximumQueued: Int = 100) {
            var configuration = Machine.Configuration()
            configuration.size = size
            configuration.maximumQueuedRequests = maximumQueued
            configuration.reconnectBackoffBase = .milliseconds(100)
            configuration.reconnectBackoffLimit = .seconds(30)
            self.machine = Machine(configuration: configuration)
        }

        /// Opens a connection as the pool would: asked for (a warm-up counts it as connecting),
        /// an id, set up, then its stream limit.
        mutating func open(limit: Int) -> Int {
            _ = self.machine.warmUp(using: &self.random)
            let id = self.machine.makeConnectionID()
            _ = self.machine.connectionOpened(id, id * 100)
            _ = self.machine.limitChanged(on: id, to: limit, using: &self.random)
            return id
        }

        mutating func place(_ request: Int, avoiding: Int? = nil, deadline: NIODeadline = now + .seconds(10)) -> (Machine.PlaceAction, Machine.ConnectAction) {
            self.machine.place(request, avoiding: avoiding, deadline: deadline, using: &self.random)
        }
    }

    static func connection(_ action: Machine.PlaceAction) -> Int? {
        if case .send(let placement) = action { return placement.connectionID }
        return nil
    }

    @Test("The first request opens the pool's connections and waits for one; nothing is opened twice")
    func opensOnDemand() {
        var pool = Pool(size: 2)
        let (action, connect) = pool.place(1)
        guard case .queued(let startSweep) = action else {
            Issue.record("no connection yet: the request waits")
            return
        }
        #expect(startSweep)
        #expect(connect == .open(2))
        let secondConnect = pool.place(2).1
        #expect(secondConnect == .none, "two are already connecting")
        let warmUp = pool.machine.warmUp(using: &pool.random)
        #expect(warmUp == .none)
        let id = pool.machine.makeConnectionID()
        let kept = pool.machine.connectionOpened(id, 100)
        #expect(kept)
        // Limit 1 until the connection reports its own: the oldest waiter goes first.
        let (_, placements) = pool.machine.limitChanged(on: id, to: 10, using: &pool.random)
        #expect(placements.map(\.request) == [1, 2])
        #expect(pool.machine.usableConnections == 1 && pool.machine.connectionsOpened == 1)
    }

    @Test("A request goes to the connection with the most room, not the one its last attempt used unless only that one has room")
    func placement() {
        var pool = Pool(size: 2)
        let a = pool.open(limit: 3)
        let b = pool.open(limit: 5)
        let first = Self.connection(pool.place(1).0)
        #expect(first == b)
        let second = Self.connection(pool.place(2, avoiding: b).0)
        #expect(second == a)
        _ = pool.machine.limitChanged(on: a, to: 0, using: &pool.random)  // a goes away
        let third = Self.connection(pool.place(3, avoiding: b).0)
        #expect(third == b, "the avoided connection, rather than none")
    }

    @Test("Without room requests queue, oldest first; the queue is bounded")
    func queue() {
        var pool = Pool(size: 1, maximumQueued: 2)
        let a = pool.open(limit: 1)
        let placed = Self.connection(pool.place(1).0)
        #expect(placed == a)
        guard case .queued = pool.place(2).0, case .queued = pool.place(3).0 else {
            Issue.record("no room: queued")
            return
        }
        guard case .fail(let request, let failure) = pool.place(4).0 else {
            Issue.record("a full queue refuses")
            return
        }
        #expect(request == 4 && failure.kind == .unprocessed)
        let afterFirst = pool.machine.streamFinished(on: a, answered: true).map(\.request)
        #expect(afterFirst == [2])
        let afterSecond = pool.machine.streamFinished(on: a, answered: true).map(\.request)
        #expect(afterSecond == [3])
        #expect(pool.machine.queuedRequests == 0)
    }

    @Test("Queued requests fail at their deadline; the sweep stops when nothing waits")
    func queueDeadlines() {
        var pool = Pool(size: 1)
        _ = pool.place(1, deadline: Self.now + .seconds(1))
        _ = pool.place(2, deadline: Self.now + .seconds(5))
        let first = pool.machine.sweepQueue(now: Self.now + .seconds(2))
        #expect(first.expired == [1] && first.sweepAgain)
        let second = pool.machine.sweepQueue(now: Self.now + .seconds(6))
        #expect(second.expired == [2] && !second.sweepAgain)
    }

    @Test("After failed connects: one connection at a time, after a backoff that doubles with jitter; the first answer ends the streak")
    func reconnectBackoff() {
        var pool = Pool(size: 2)
        let firstConnect = pool.place(1).1
        #expect(firstConnect == .open(2))
        var delays: [TimeAmount] = []
        var connect = pool.machine.connectFailed(using: &pool.random)
        for _ in 0..<6 {
            guard case .openAfter(let delay) = connect else {
                Issue.record("expected a backoff, got \(connect)")
                return
            }
            delays.append(delay)
            let meanwhile = pool.machine.warmUp(using: &pool.random)
            #expect(meanwhile == .none, "nothing more while a reconnect is scheduled")
            let due = pool.machine.reconnectDue()
            #expect(due)
            connect = pool.machine.connectFailed(using: &pool.random)
        }
        // The first failure was one of two connecting; the streak counts from there.
        for (index, delay) in delays.enumerated() {
            let step = min(Int64(100_000_000) << Int64(index), 30_000_000_000)
            #expect(delay.nanoseconds >= step / 2 && delay.nanoseconds <= step, "backoff \(index + 1): \(delay)")
        }
        // A connection finally opens and answers: the next one opens at once.
        guard case .openAfter = connect else { return }
        let finallyDue = pool.machine.reconnectDue()
        #expect(finallyDue)
        let id = pool.machine.makeConnectionID()
        _ = pool.machine.connectionOpened(id, 1)
        _ = pool.machine.limitChanged(on: id, to: 10, using: &pool.random)
        _ = pool.machine.streamFinished(on: id, answered: true)  // request 1, dispatched from the queue
        // The other connect of the first pair opens too; then one connection goes away while
        // a request is in flight: its replacement opens at once, without a backoff.
        let other = pool.machine.makeConnectionID()
        _ = pool.machine.connectionOpened(other, 2)
        _ = pool.machine.limitChanged(on: other, to: 10, using: &pool.random)
        _ = pool.place(2)
        let (replacement, _) = pool.machine.limitChanged(on: id, to: 0, using: &pool.random)
        #expect(replacement == .open(1), "no backoff once a connection answered")
    }

    @Test("A connection going away (GOAWAY: limit 0) is replaced at once while there is traffic, not when idle")
    func goAwayReplacement() {
        var busy = Pool(size: 1)
        let a = busy.open(limit: 10)
        _ = busy.place(1)
        let (connect, _) = busy.machine.limitChanged(on: a, to: 0, using: &busy.random)
        #expect(connect == .open(1))

        var idle = Pool(size: 1)
        let b = idle.open(limit: 10)
        let (idleConnect, _) = idle.machine.limitChanged(on: b, to: 0, using: &idle.random)
        #expect(idleConnect == .none)
        let nextRequest = idle.place(1).1
        #expect(nextRequest == .open(1), "the next request opens one")
    }

    @Test("A connection that closes before answering anything counts as a failure: its replacement waits for the backoff")
    func closedBeforeAnswering() {
        var pool = Pool(size: 1)
        let a = pool.open(limit: 1)
        _ = pool.place(1)
        _ = pool.place(2)  // queued behind 1
        guard case .openAfter = pool.machine.connectionClosed(a, using: &pool.random) else {
            Issue.record("expected a backoff")
            return
        }
    }

    @Test("Shut down: queued requests and connections are handed back; nothing new is taken")
    func shutDown() {
        var pool = Pool(size: 1)
        let a = pool.open(limit: 1)
        _ = pool.place(1)
        _ = pool.place(2)
        let (requests, connections) = pool.machine.shutDown()
        #expect(requests == [2] && connections == [a * 100])
        guard case .fail(3, let failure) = pool.place(3).0 else {
            Issue.record("a shut-down pool refuses")
            return
        }
        #expect(failure.kind == .unprocessed)
    }
}

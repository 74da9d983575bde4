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

        /// - Parameter maximum: the most connections while every stream is taken (`size` unless
        ///   given: most tests are about a pool that does not grow).
        init(size: Int = 2, maximum: Int? = nil, maximumQueued: Int = 100) {
            var configuration = Machine.Configuration()
            configuration.size = size
            configuration.maximumSize = maximum ?? size
            configuration.maximumQueuedRequests = maximumQueued
            configuration.reconnectBackoffBase = .milliseconds(100)
            configuration.reconnectBackoffLimit = .seconds(30)
            self.machine = Machine(configuration: configuration)
        }

        /// Connections asked for and not opened yet, by id.
        var connecting: [Int] = []

        /// Opens a connection as the pool would: asked for (a warm-up counts it as connecting,
        /// with an id), set up, then its stream limit.
        mutating func open(limit: Int) -> Int {
            self.note(self.machine.warmUp(using: &self.random).connect)
            let id = self.connecting.removeFirst()
            _ = self.machine.connectionOpened(id, id * 100, now: APNsConnectionPoolStateMachineTests.now)
            _ = self.machine.limitChanged(
                on: id,
                to: limit,
                now: APNsConnectionPoolStateMachineTests.now,
                using: &self.random
            )
            return id
        }

        /// Remembers the ids of connections the machine asked to open.
        mutating func note(_ connect: Machine.ConnectAction) {
            if case .open(let ids) = connect { self.connecting += ids }
        }

        mutating func place(
            _ request: Int,
            avoiding: Int? = nil,
            deadline: NIODeadline = now + .seconds(10)
        ) -> Machine.Action {
            let action = self.machine.place(request, avoiding: avoiding, deadline: deadline, using: &self.random)
            self.note(action.connect)
            return action
        }
    }

    static func connection(_ action: Machine.Action) -> Int? {
        action.send.first?.connectionID
    }

    static func isQueued(_ action: Machine.Action) -> Bool {
        action.send.isEmpty && action.fail.isEmpty
    }

    @Test("The first request opens the pool's connections and waits for one; nothing is opened twice")
    func opensOnDemand() {
        var pool = Pool(size: 2)
        let action = pool.place(1)
        #expect(Self.isQueued(action), "no connection yet: the request waits")
        #expect(action.sweepQueue)
        #expect(action.connect == .open([1, 2]))
        let secondConnect = pool.place(2).connect
        #expect(secondConnect == .none, "two are already connecting")
        let warmUp = pool.machine.warmUp(using: &pool.random)
        #expect(warmUp.connect == .none)
        let id = pool.connecting.removeFirst()
        let opened = pool.machine.connectionOpened(id, 100, now: Self.now)
        #expect(opened.close.isEmpty, "kept")
        // Limit 1 until the connection reports its own: the oldest waiter goes first.
        let placements = pool.machine.limitChanged(on: id, to: 10, now: Self.now, using: &pool.random).send
        #expect(placements.map(\.request) == [1, 2])
        #expect(pool.machine.usableConnections == 1 && pool.machine.connectionsOpened == 1)
    }

    @Test(
        "A request goes to the connection with the most room, not the one its last attempt used unless only that one has room"
    )
    func placement() {
        var pool = Pool(size: 2)
        let a = pool.open(limit: 3)
        let b = pool.open(limit: 5)
        let first = Self.connection(pool.place(1))
        #expect(first == b)
        let second = Self.connection(pool.place(2, avoiding: b))
        #expect(second == a)
        _ = pool.machine.limitChanged(on: a, to: 0, now: Self.now, using: &pool.random)  // a goes away
        let third = Self.connection(pool.place(3, avoiding: b))
        #expect(third == b, "the avoided connection, rather than none")
    }

    @Test("Without room requests queue, oldest first; the queue is bounded")
    func queue() {
        var pool = Pool(size: 1, maximumQueued: 2)
        let a = pool.open(limit: 1)
        let placed = Self.connection(pool.place(1))
        #expect(placed == a)
        #expect(Self.isQueued(pool.place(2)) && Self.isQueued(pool.place(3)), "no room: queued")
        let refused = pool.place(4).fail
        #expect(refused.map(\.request) == [4], "a full queue refuses")
        #expect(refused.first?.failure.kind == .unprocessed)
        let afterFirst = pool.machine.streamFinished(on: a, answered: true).send.map(\.request)
        #expect(afterFirst == [2])
        let afterSecond = pool.machine.streamFinished(on: a, answered: true).send.map(\.request)
        #expect(afterSecond == [3])
        #expect(pool.machine.queuedRequests == 0)
    }

    @Test(
        "While requests wait, every stream is taken and every connection has answered, one more connection opens at a time, up to the maximum"
    )
    func growsWhileBusy() {
        var pool = Pool(size: 1, maximum: 3)
        let a = pool.open(limit: 1)
        #expect(Self.connection(pool.place(1)) == a)
        let beforeAnswer = pool.place(2)
        #expect(Self.isQueued(beforeAnswer))
        #expect(beforeAnswer.connect == .none, "a has not answered: its server may still raise its limit")

        let answered = pool.machine.streamFinished(on: a, answered: true)
        #expect(answered.send.map(\.request) == [2])
        #expect(answered.connect == .none, "nothing waits")
        let third = pool.place(3)
        #expect(Self.isQueued(third))
        #expect(third.connect == .open([2]), "a answered and is full, and 3 waits: one more")
        #expect(pool.place(4).connect == .none, "one at a time: 2 is connecting")

        let b = pool.connecting.removeFirst()
        _ = pool.machine.connectionOpened(b, b * 100, now: Self.now)
        let ready = pool.machine.limitChanged(on: b, to: 1, now: Self.now, using: &pool.random)
        #expect(ready.send.map(\.request) == [3])
        #expect(ready.connect == .none, "b has not answered yet")
        let bAnswered = pool.machine.streamFinished(on: b, answered: true)
        #expect(bAnswered.send.map(\.request) == [4])
        #expect(bAnswered.connect == .none, "nothing waits")
        #expect(pool.place(5).connect == .open([3]))

        let c = pool.connecting.removeFirst()
        _ = pool.machine.connectionOpened(c, c * 100, now: Self.now)
        #expect(pool.machine.limitChanged(on: c, to: 1, now: Self.now, using: &pool.random).send.map(\.request) == [5])
        _ = pool.machine.streamFinished(on: c, answered: true)
        #expect(Self.connection(pool.place(6)) == c)
        let atMaximum = pool.place(7)
        #expect(Self.isQueued(atMaximum) && atMaximum.connect == .none, "three connections: the maximum")
        #expect(pool.machine.usableConnections == 3 && pool.machine.connectionsOpened == 3)
    }

    @Test(
        "A burst that waits behind a connection's first answer opens one more connection when that answer leaves it full; none beyond the size when the maximum is the size"
    )
    func growsAtTheAnswerThatLeavesItFull() {
        var pool = Pool(size: 1, maximum: 2)
        let a = pool.open(limit: 1)
        _ = pool.place(1)
        #expect(Self.isQueued(pool.place(2)) && Self.isQueued(pool.place(3)))
        let answered = pool.machine.streamFinished(on: a, answered: true)
        #expect(answered.send.map(\.request) == [2])
        #expect(answered.connect == .open([2]), "3 still waits and a is full")

        var fixed = Pool(size: 1)
        let b = fixed.open(limit: 1)
        _ = fixed.place(1)
        _ = fixed.place(2)
        _ = fixed.place(3)
        #expect(fixed.machine.streamFinished(on: b, answered: true).connect == .none)
        #expect(fixed.place(4).connect == .none)
    }

    @Test("Queued requests fail at their deadline; the sweep stops when nothing waits")
    func queueDeadlines() {
        var pool = Pool(size: 1)
        _ = pool.place(1, deadline: Self.now + .seconds(1))
        _ = pool.place(2, deadline: Self.now + .seconds(5))
        let first = pool.machine.sweepQueue(now: Self.now + .seconds(2))
        #expect(first.fail.map(\.request) == [1] && first.sweepQueue)
        let second = pool.machine.sweepQueue(now: Self.now + .seconds(6))
        #expect(second.fail.map(\.request) == [2] && !second.sweepQueue)
    }

    @Test(
        "After failed connects: one connection at a time, after a backoff that doubles with jitter; the first answer ends the streak"
    )
    func reconnectBackoff() {
        var pool = Pool(size: 2, maximum: 3)
        let firstConnect = pool.place(1).connect
        #expect(firstConnect == .open([1, 2]))
        var delays: [TimeAmount] = []
        var connect = pool.machine.connectFailed(using: &pool.random).connect
        for _ in 0..<6 {
            guard case .openAfter(let delay) = connect else {
                Issue.record("expected a backoff, got \(connect)")
                return
            }
            delays.append(delay)
            let meanwhile = pool.machine.warmUp(using: &pool.random).connect
            #expect(meanwhile == .none, "nothing more while a reconnect is scheduled")
            guard case .open(let ids) = pool.machine.reconnectDue().connect, ids.count == 1 else {
                Issue.record("the backoff's end opens one connection")
                return
            }
            connect = pool.machine.connectFailed(using: &pool.random).connect
        }
        // The first failure was one of two connecting; the streak counts from there.
        for (index, delay) in delays.enumerated() {
            let step = min(Int64(100_000_000) << Int64(index), 30_000_000_000)
            #expect(delay.nanoseconds >= step / 2 && delay.nanoseconds <= step, "backoff \(index + 1): \(delay)")
        }
        // A connection finally opens and answers: the next one opens at once.
        guard case .openAfter = connect else {
            Issue.record("the sixth failure schedules a backoff too, got \(connect)")
            return
        }
        guard case .open(let finallyDue) = pool.machine.reconnectDue().connect, let id = finallyDue.first else {
            Issue.record("the backoff's end opens one connection")
            return
        }
        _ = pool.machine.connectionOpened(id, 1, now: Self.now)
        _ = pool.machine.limitChanged(on: id, to: 10, now: Self.now, using: &pool.random)
        _ = pool.machine.streamFinished(on: id, answered: true)  // request 1, dispatched from the queue
        // The other connect of the first pair opens too; then one connection goes away a minute
        // later while a request is in flight: its replacement opens at once, without a backoff.
        let other = 2  // the second of the first pair
        _ = pool.machine.connectionOpened(other, 2, now: Self.now)
        _ = pool.machine.limitChanged(on: other, to: 10, now: Self.now, using: &pool.random)
        _ = pool.place(2)
        let replacement = pool.machine.limitChanged(on: id, to: 0, now: Self.now + .minutes(1), using: &pool.random)
            .connect
        guard case .open(let ids) = replacement else {
            Issue.record("no backoff once a connection answered, got \(replacement)")
            return
        }
        #expect(ids.count == 1)
    }

    @Test("A connection going away (GOAWAY: limit 0) is replaced at once while there is traffic, not when idle")
    func goAwayReplacement() {
        var busy = Pool(size: 1, maximum: 2)
        let a = busy.open(limit: 10)
        _ = busy.place(1)
        // It lived a minute: not short-lived.
        let connect = busy.machine.limitChanged(on: a, to: 0, now: Self.now + .minutes(1), using: &busy.random).connect
        #expect(connect == .open([2]))

        var idle = Pool(size: 1, maximum: 2)
        let b = idle.open(limit: 10)
        let idleConnect = idle.machine.limitChanged(on: b, to: 0, now: Self.now + .minutes(1), using: &idle.random)
            .connect
        #expect(idleConnect == .none)
        let nextRequest = idle.place(1).connect
        #expect(nextRequest == .open([2]), "the next request opens one")
    }

    @Test(
        "A connection that closes before answering anything counts as a failure: its replacement waits for the backoff"
    )
    func closedBeforeAnswering() {
        var pool = Pool(size: 1)
        let a = pool.open(limit: 1)
        _ = pool.place(1)
        _ = pool.place(2)  // queued behind 1
        guard case .openAfter = pool.machine.connectionClosed(a, now: Self.now, using: &pool.random).connect else {
            Issue.record("expected a backoff")
            return
        }
    }

    @Test(
        "Draining connections count against the bound: a replacement waits until one closes, and then opens"
    )
    func drainingCountsAgainstTheBound() {
        var pool = Pool(size: 1, maximum: 2)
        let a = pool.open(limit: 10)
        _ = pool.place(1)
        _ = pool.machine.streamFinished(on: a, answered: true)
        _ = pool.place(2)  // in flight while a drains, and never answered
        // Each connection lives a minute: none is short-lived.
        let first = pool.machine.limitChanged(on: a, to: 0, now: Self.now + .minutes(1), using: &pool.random).connect
        #expect(first == .open([2]), "one draining connection leaves room for its replacement")
        pool.note(first)
        let b = pool.connecting.removeFirst()
        _ = pool.machine.connectionOpened(b, b * 100, now: Self.now + .minutes(1))
        _ = pool.machine.limitChanged(on: b, to: 10, now: Self.now + .minutes(1), using: &pool.random)
        _ = pool.place(3)
        _ = pool.machine.streamFinished(on: b, answered: true)
        _ = pool.place(4)
        let second = pool.machine.limitChanged(on: b, to: 0, now: Self.now + .minutes(2), using: &pool.random).connect
        #expect(second == .none, "two draining: the bound of 2 is reached")
        #expect(pool.machine.counts == counts(usable: 0, draining: 2, connecting: 0))
        #expect(Self.isQueued(pool.place(5)), "requests wait meanwhile")
        let warmUp = pool.machine.warmUp(using: &pool.random).connect
        #expect(warmUp == .none)
        let closed = pool.machine.connectionClosed(a, now: Self.now + .minutes(2), using: &pool.random).connect
        #expect(closed == .open([3]), "a draining connection closed: its slot goes to a replacement")
        #expect(pool.machine.counts == counts(usable: 0, draining: 1, connecting: 1))
    }

    @Test(
        "Connections that answer and go away at once are short-lived: each replacement waits for a backoff that keeps doubling"
    )
    func shortLivedConnectionsBackOff() {
        var pool = Pool(size: 1, maximum: 2)
        var now = Self.now
        var id = pool.open(limit: 10)
        var delays: [TimeAmount] = []
        for request in 0..<8 {
            _ = pool.place(request)
            _ = pool.machine.streamFinished(on: id, answered: true)
            _ = pool.place(100 + request)  // in flight when the connection goes away
            now = now + .milliseconds(5)
            let goAway = pool.machine.limitChanged(on: id, to: 0, now: now, using: &pool.random).connect
            _ = pool.machine.connectionClosed(id, now: now, using: &pool.random)
            guard case .openAfter(let delay) = goAway else {
                Issue.record("replacement \(request + 1) was not delayed: \(goAway)")
                return
            }
            delays.append(delay)
            now = now + delay
            guard case .open(let ids) = pool.machine.reconnectDue().connect, ids.count == 1 else {
                Issue.record("the backoff's end opens one connection")
                return
            }
            id = ids[0]
            _ = pool.machine.connectionOpened(id, id * 100, now: now)
            _ = pool.machine.limitChanged(on: id, to: 10, now: now, using: &pool.random)
        }
        for (index, delay) in delays.enumerated() {
            let step = min(Int64(100_000_000) << Int64(index), 30_000_000_000)
            #expect(delay.nanoseconds >= step / 2 && delay.nanoseconds <= step, "backoff \(index + 1): \(delay)")
        }
        // A connection that lives past the window goes away without a backoff; after a quiet
        // spell, a short-lived one starts the streak again.
        _ = pool.place(999)
        _ = pool.machine.streamFinished(on: id, answered: true)
        _ = pool.place(1000)
        now = now + .minutes(2)
        let longLived = pool.machine.limitChanged(on: id, to: 0, now: now, using: &pool.random).connect
        guard case .open(let ids) = longLived, let fresh = ids.first else {
            Issue.record("a connection that lived two minutes is replaced at once, got \(longLived)")
            return
        }
        _ = pool.machine.connectionClosed(id, now: now, using: &pool.random)
        _ = pool.machine.connectionOpened(fresh, fresh * 100, now: now)
        _ = pool.machine.limitChanged(on: fresh, to: 10, now: now, using: &pool.random)
        _ = pool.place(1001)
        _ = pool.machine.streamFinished(on: fresh, answered: true)
        _ = pool.place(1002)
        let again = pool.machine.limitChanged(on: fresh, to: 0, now: now + .seconds(1), using: &pool.random).connect
        guard case .openAfter(let delay) = again else {
            Issue.record("a short-lived connection after the quiet spell: a backoff, got \(again)")
            return
        }
        #expect(delay <= .milliseconds(100), "the streak started again: \(delay)")
    }

    func counts(usable: Int, draining: Int, connecting: Int) -> APNsClient.ConnectionCounts {
        var counts = APNsClient.ConnectionCounts()
        counts.usable = usable
        counts.draining = draining
        counts.connecting = connecting
        return counts
    }

    @Test("Shut down: queued requests and connections are handed back; nothing new is taken")
    func shutDown() {
        var pool = Pool(size: 1)
        let a = pool.open(limit: 1)
        _ = pool.place(1)
        _ = pool.place(2)
        let shutDown = pool.machine.shutDown()
        #expect(shutDown.fail.map(\.request) == [2] && shutDown.close == [a * 100])
        let refused = pool.place(3).fail
        #expect(refused.map(\.request) == [3], "a shut-down pool refuses")
        #expect(refused.first?.failure.kind == .unprocessed)
    }
}

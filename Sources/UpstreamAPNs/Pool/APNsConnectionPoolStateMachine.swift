import NIOCore

// Over 400 lines, on purpose: every rule of the pool (placing a request, growing while every
// stream is taken, the backoff, replacing a closed connection, the shutdown) decides from the
// same connection and queue state, and reads in one switch per event; its tests drive it
// event by event without I/O. Splitting the events across files would split that state.

/// The state of a pool of HTTP/2 connections to one APNs endpoint, without I/O.
///
/// ``APNsConnectionPool`` keeps it under a lock, feeds it events (a request to place, a stream
/// finished, a connection's stream limit changed, a connection opened, failed or closed, a timer
/// fired, the shutdown) and executes the one ``Action`` each returns: send requests on
/// connections, fail requests, open connections now or after a backoff, close connections, sweep
/// the queue. Time and the backoff's randomness are inputs. `Connection` and `Request` are
/// whatever the pool sends on and completes (the tests use numbers).
///
/// The rules:
/// - **Placement**: a request goes to the connection with the most room (its stream limit less
///   its requests in flight), avoiding the connection its last attempt used where another has
///   room; with no room anywhere it waits in a FIFO queue (bounded), never past its deadline.
/// - **Opening**: the pool wants `size` connections that are usable or connecting. It opens them
///   on demand (the first request, a warm-up, a connection going away while there is traffic).
/// - **The bound**: connections open, draining or connecting are never more than `maximumSize`.
///   A draining connection (GOAWAY) still holds a socket until its streams are answered or
///   reset, so it counts: an upstream that sends GOAWAY after every answer and leaves a stream
///   open cannot make the pool open connections without bound.
/// - **Growing**: while requests wait because every stream of every connection is taken, and
///   every connection has answered (a new one carries one stream until then, and its server may
///   still raise its limit), one more connection is opened, up to `maximumSize`. A server that
///   allows few streams per connection is then used through more connections; the extra ones
///   stay, like the others, and when connections close a pool replaces them only up to `size`.
/// - **Backoff**: after a failed connect, or a connection that closed before answering anything,
///   connections are opened one at a time after an exponential backoff with jitter (base
///   doubling up to the limit, a random point in the upper half); the first answer on a
///   connection ends the failure streak. A connection that goes away (GOAWAY, or closed after
///   answering) within `shortLivedWindow` of opening is short-lived: its replacement waits for
///   the backoff too, on a streak of its own that answers do not end (such a connection may
///   answer once before it goes); it starts again after a quiet spell of twice the backoff's
///   limit.
/// - **GOAWAY**: a connection that goes away reports limit 0; it takes nothing new, and is
///   replaced when there is traffic (at once unless short-lived, within the bound). Its
///   unprocessed streams come back through the client's retry state machine as new requests.
package struct APNsConnectionPoolStateMachine<Connection, Request> {
    /// The pool's part of the client's configuration (``APNsClient/Configuration``, where the
    /// defaults live).
    package struct Configuration: Sendable, Hashable {
        package var size: Int
        /// The most connections while every stream is taken and requests wait (at least `size`).
        package var maximumSize: Int
        package var maximumQueuedRequests: Int
        package var reconnectBackoffBase: TimeAmount
        package var reconnectBackoffLimit: TimeAmount
        /// A connection that goes away sooner than this after opening is short-lived.
        package var shortLivedWindow: TimeAmount

        /// - Parameters:
        ///   - size: this pool's share of the client's connections (all of them when `nil`).
        ///   - maximumSize: its share of the most connections (all of them when `nil`).
        package init(_ client: APNsClient.Configuration = .init(), size: Int? = nil, maximumSize: Int? = nil) {
            self.size = size ?? client.connectionsPerPool
            self.maximumSize = max(self.size, maximumSize ?? client.maximumConnectionsPerPool)
            self.maximumQueuedRequests = client.maximumQueuedRequests
            self.reconnectBackoffBase = client.reconnectBackoffBase
            self.reconnectBackoffLimit = client.reconnectBackoffLimit
            self.shortLivedWindow = client.shortLivedConnectionWindow
        }
    }

    /// Connections to open.
    package enum ConnectAction: Hashable, Sendable {
        case none
        /// Open connections with these ids now (already counted as connecting).
        case open([Int])
        /// Report ``reconnectDue()`` after this delay.
        case openAfter(TimeAmount)
    }

    /// What the pool does after an event; every event answers one.
    package struct Action {
        /// Send each request on its connection.
        package var send = Placements()
        /// Fail each request, with why.
        package var fail: [(request: Request, failure: APNsStreamFailure)] = []
        package var connect: ConnectAction = .none
        /// Close these connections.
        package var close: [Connection] = []
        /// Report ``sweepQueue(now:)`` after the sweep interval.
        package var sweepQueue = false

        package init() {}
    }

    /// A request placed on a connection: send it there.
    package struct Placement {
        package var request: Request
        package var connectionID: Int
        package var connection: Connection
    }

    /// The requests one event places. Almost every event places one (a request with room, or the
    /// waiter a finished stream lets out), which is held here without an array: an array was an
    /// allocation per request.
    package struct Placements: RandomAccessCollection {
        private var single: Placement?
        /// Every placement, once there are two or more.
        private var several: [Placement] = []

        package init() {}

        package var startIndex: Int { 0 }
        package var endIndex: Int { self.several.isEmpty ? (self.single == nil ? 0 : 1) : self.several.count }

        package subscript(position: Int) -> Placement {
            self.several.isEmpty ? self.single! : self.several[position]
        }

        package mutating func append(_ placement: Placement) {
            if !self.several.isEmpty {
                self.several.append(placement)
            } else if let single = self.single {
                self.several = [single, placement]
                self.single = nil
            } else {
                self.single = placement
            }
        }
    }

    private struct Entry {
        var id: Int
        var connection: Connection
        var openedAt: NIODeadline
        var limit: Int
        var inFlight = 0
        var hasAnswered = false
        /// Whether it went away (limit 0 or closed) and was judged: a failed connect,
        /// short-lived, or neither.
        var wentAway = false
        var room: Int { self.limit - self.inFlight }
    }

    private struct Waiter {
        var request: Request
        var avoid: Int?
        var deadline: NIODeadline
    }

    private let configuration: Configuration
    /// The open connections, in the order they opened. A pool has a few: they are found by a
    /// scan, which costs less than hashing their ids in a dictionary at every request.
    private var entries: [Entry] = []
    private var connecting = 0
    private var nextConnectionID = 1
    private var waiters = CircularBuffer<Waiter>()
    private var deadlineSweepScheduled = false
    private var consecutiveFailures = 0
    /// Short-lived connections in a row, their last, and whether a replacement owes a backoff.
    private var shortLivedStreak = 0
    private var lastShortLived: NIODeadline?
    private var backoffAfterShortLived = false
    private var reconnectScheduled = false
    package private(set) var isShutDown = false
    package private(set) var connectionsOpened = 0

    package init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// Connections that are ready and take requests now.
    package var usableConnections: Int {
        self.entries.reduce(0) { $0 + ($1.limit > 0 ? 1 : 0) }
    }

    package var queuedRequests: Int { self.waiters.count }

    /// The connections by state; a connection at a stream limit of 0 counts as draining.
    package var counts: APNsClient.ConnectionCounts {
        var counts = APNsClient.ConnectionCounts()
        counts.usable = self.usableConnections
        counts.draining = self.entries.count - counts.usable
        counts.connecting = self.connecting
        return counts
    }

    /// Whether a request placed now would be sent at once: a connection has a free stream and
    /// nothing waits.
    package var hasRoom: Bool {
        self.waiters.isEmpty && self.pickConnection(avoiding: nil) != nil
    }

    /// Each connection's requests in flight and stream limit, and the queue.
    package var snapshot: String {
        let connections = self.entries.sorted { $0.id < $1.id }.map {
            "#\($0.id): \($0.inFlight)/\($0.limit)"
        }
        return
            "connections [\(connections.joined(separator: ", "))], queued \(self.waiters.count), connecting \(self.connecting)"
    }

    // MARK: Requests

    /// Places a request: on the connection with the most room (not `avoid`, where another has
    /// room), else in the queue until `deadline`.
    package mutating func place(
        _ request: Request,
        avoiding avoid: Int?,
        deadline: NIODeadline,
        using random: inout some RandomNumberGenerator
    ) -> Action {
        var action = Action()
        if self.isShutDown {
            action.fail = [(request, .unprocessed("the upstream client is shut down"))]
            return action
        }
        if let index = self.pickConnection(avoiding: avoid) {
            self.entries[index].inFlight += 1
            action.send.append(
                Placement(
                    request: request,
                    connectionID: self.entries[index].id,
                    connection: self.entries[index].connection
                )
            )
            action.connect = self.connectionsToOpen(using: &random)
            return action
        }
        guard self.waiters.count < self.configuration.maximumQueuedRequests else {
            action.fail = [(request, .unprocessed("too many requests waiting for an upstream connection"))]
            return action
        }
        self.waiters.append(Waiter(request: request, avoid: avoid, deadline: deadline))
        action.sweepQueue = !self.deadlineSweepScheduled
        self.deadlineSweepScheduled = true
        action.connect = self.connectionsToOpen(using: &random)
        if action.connect == .none {
            action.connect = self.growWhileBusy()
        }
        return action
    }

    /// A request placed on `connectionID` is over: queued requests that now have room go out.
    package mutating func streamFinished(on connectionID: Int, answered: Bool) -> Action {
        var action = Action()
        guard let index = self.entryIndex(of: connectionID) else { return action }
        self.entries[index].inFlight -= 1
        if answered, !self.entries[index].hasAnswered {
            self.entries[index].hasAnswered = true
            self.consecutiveFailures = 0
        }
        action.send = self.dispatchWaiters()
        action.connect = self.growWhileBusy()
        return action
    }

    /// The queue's sweep: requests whose deadline has passed fail; it sweeps again while any wait.
    package mutating func sweepQueue(now: NIODeadline) -> Action {
        var action = Action()
        if self.waiters.contains(where: { $0.deadline <= now }) {
            var kept = CircularBuffer<Waiter>(initialCapacity: self.waiters.count)
            for waiter in self.waiters {
                if waiter.deadline <= now {
                    action.fail.append(
                        (waiter.request, .unprocessed("no upstream connection had room before the deadline"))
                    )
                } else {
                    kept.append(waiter)
                }
            }
            self.waiters = kept
        }
        self.deadlineSweepScheduled = !self.waiters.isEmpty && !self.isShutDown
        action.sweepQueue = self.deadlineSweepScheduled
        return action
    }

    // MARK: Connections

    /// Opens the connections now rather than at the first request.
    package mutating func warmUp(using random: inout some RandomNumberGenerator) -> Action {
        var action = Action()
        action.connect = self.connectionsToOpen(using: &random)
        return action
    }

    /// A connection is set up at `now`; closed again at once when the pool was shut down
    /// meanwhile.
    package mutating func connectionOpened(_ connectionID: Int, _ connection: Connection, now: NIODeadline) -> Action {
        var action = Action()
        self.connecting -= 1
        guard !self.isShutDown else {
            action.close = [connection]
            return action
        }
        // One stream until the connection reports its real limit.
        self.entries.append(Entry(id: connectionID, connection: connection, openedAt: now, limit: 1))
        self.connectionsOpened += 1
        return action
    }

    package mutating func connectFailed(using random: inout some RandomNumberGenerator) -> Action {
        self.connecting -= 1
        self.consecutiveFailures += 1
        var action = Action()
        action.connect = self.connectionsToOpen(using: &random)
        return action
    }

    /// The backoff timer fired: one connection is opened, when one is wanted and the bound has
    /// room (a draining connection that closes later, or the next request, opens it otherwise).
    package mutating func reconnectDue() -> Action {
        self.reconnectScheduled = false
        var action = Action()
        guard !self.isShutDown, self.wantedConnections > 0 else { return action }
        self.connecting += 1
        action.connect = .open([self.makeConnectionID()])
        return action
    }

    /// A connection's stream limit changed at `now` (0: it goes away or is not set up).
    package mutating func limitChanged(
        on connectionID: Int,
        to limit: Int,
        now: NIODeadline,
        using random: inout some RandomNumberGenerator
    ) -> Action {
        var action = Action()
        guard let index = self.entryIndex(of: connectionID) else { return action }
        self.entries[index].limit = limit
        if limit == 0 {
            self.judgeLifetime(at: index, now: now, closing: false)
        }
        // A connection going away is replaced while there is traffic (at once, or after the
        // backoff when short-lived; within the bound); an idle pool opens connections when the
        // next request comes.
        let hasTraffic = !self.waiters.isEmpty || self.entries.contains { $0.inFlight > 0 }
        if limit == 0, hasTraffic {
            action.connect = self.connectionsToOpen(using: &random)
        }
        if limit > 0 {
            action.send = self.dispatchWaiters()
        }
        return action
    }

    package mutating func connectionClosed(
        _ connectionID: Int,
        now: NIODeadline,
        using random: inout some RandomNumberGenerator
    ) -> Action {
        var action = Action()
        guard let index = self.entryIndex(of: connectionID) else { return action }
        self.judgeLifetime(at: index, now: now, closing: true)
        self.entries.remove(at: index)
        // Replaced now when requests are waiting; otherwise the next request opens one.
        if !self.waiters.isEmpty {
            action.connect = self.connectionsToOpen(using: &random)
        }
        return action
    }

    /// Takes nothing more: the queued requests fail and every connection closes.
    package mutating func shutDown() -> Action {
        self.isShutDown = true
        var action = Action()
        action.fail = self.waiters.map { ($0.request, .unprocessed("the upstream client is shut down")) }
        action.close = self.entries.map(\.connection)
        self.waiters.removeAll()
        return action
    }

    // MARK: Private

    /// An id for a connection about to be opened.
    private mutating func makeConnectionID() -> Int {
        defer { self.nextConnectionID += 1 }
        return self.nextConnectionID
    }

    // The scans below read each entry's fields in place: a loop over the entries themselves
    // would copy each one, a retain and a release of its connection.

    /// The index in ``entries`` of the connection `id`.
    private func entryIndex(of id: Int) -> Int? {
        for index in self.entries.indices where self.entries[index].id == id {
            return index
        }
        return nil
    }

    /// The index in ``entries`` of the connection to place a request on, if one has room.
    private func pickConnection(avoiding avoid: Int?) -> Int? {
        var best: (index: Int, room: Int)?
        var avoided: Int?
        for index in self.entries.indices {
            let room = self.entries[index].room
            guard room > 0 else { continue }
            if self.entries[index].id == avoid {
                avoided = index
                continue
            }
            if best == nil || room > best!.room {
                best = (index, room)
            }
        }
        return best?.index ?? avoided
    }

    /// Moves queued requests onto connections with room, oldest first.
    private mutating func dispatchWaiters() -> Placements {
        var placements = Placements()
        // A waiter is moved out of the queue only once a connection has room for it: reading
        // it in place (`first`) copied it, a retain and a release of its request each time.
        while !self.waiters.isEmpty, self.pickConnection(avoiding: nil) != nil {
            let waiter = self.waiters.removeFirst()
            // A connection has room, so one is picked (the avoided one if it is the only one).
            let index = self.pickConnection(avoiding: waiter.avoid)!
            self.entries[index].inFlight += 1
            placements.append(
                Placement(
                    request: waiter.request,
                    connectionID: self.entries[index].id,
                    connection: self.entries[index].connection
                )
            )
        }
        return placements
    }

    /// Connections to open for `size` usable or connecting, within the bound of `maximumSize`
    /// open, draining or connecting.
    private var wantedConnections: Int {
        let missing = self.configuration.size - self.usableConnections - self.connecting
        let room = self.configuration.maximumSize - self.entries.count - self.connecting
        return max(0, min(missing, room))
    }

    /// How many connections to start now (counted as connecting), or whether to start one after
    /// a backoff.
    private mutating func connectionsToOpen(using random: inout some RandomNumberGenerator) -> ConnectAction {
        guard !self.isShutDown, !self.reconnectScheduled else { return .none }
        let wanted = self.wantedConnections
        guard wanted > 0 else { return .none }
        if self.consecutiveFailures > 0 || self.backoffAfterShortLived {
            // After a failure or a short-lived connection, one connection at a time, after a
            // backoff.
            let streak = max(self.consecutiveFailures, self.backoffAfterShortLived ? self.shortLivedStreak : 0)
            self.backoffAfterShortLived = false
            self.reconnectScheduled = true
            return .openAfter(self.backoff(after: streak, using: &random))
        }
        self.connecting += wanted
        return .open((0..<wanted).map { _ in self.makeConnectionID() })
    }

    /// A connection goes away at `now`, judged once: at its limit of 0 (GOAWAY) or at its close,
    /// whichever comes first. Closed without answering, it counts as a failed connect; otherwise
    /// it is short-lived if it lived less than the window. (A GOAWAY that comes with the answer
    /// reaches the pool before the answer does, so a limit of 0 does not ask for one.)
    private mutating func judgeLifetime(at index: Int, now: NIODeadline, closing: Bool) {
        guard !self.entries[index].wentAway else { return }
        self.entries[index].wentAway = true
        if closing, !self.entries[index].hasAnswered {
            // A server which accepts and drops connections is not hammered.
            self.consecutiveFailures += 1
            return
        }
        guard now - self.entries[index].openedAt < self.configuration.shortLivedWindow else { return }
        let quietSpell = self.configuration.reconnectBackoffLimit * 2
        if let last = self.lastShortLived, now - last < quietSpell {
            self.shortLivedStreak += 1
        } else {
            self.shortLivedStreak = 1
        }
        self.lastShortLived = now
        self.backoffAfterShortLived = true
    }

    /// One more connection while requests wait, every stream is taken and every connection has
    /// answered, below `maximumSize` and with none connecting, failing or short-lived.
    private mutating func growWhileBusy() -> ConnectAction {
        guard !self.waiters.isEmpty, self.connecting == 0, self.entries.count < self.configuration.maximumSize,
            self.consecutiveFailures == 0, !self.backoffAfterShortLived, !self.reconnectScheduled, !self.isShutDown
        else { return .none }
        for index in self.entries.indices {
            guard self.entries[index].hasAnswered, self.entries[index].room <= 0 else { return .none }
        }
        self.connecting += 1
        return .open([self.makeConnectionID()])
    }

    /// Base × 2^(streak−1), capped, then a random point in its upper half: spreads the
    /// reconnects of many bridges.
    private func backoff(after streak: Int, using random: inout some RandomNumberGenerator) -> TimeAmount {
        let exponential =
            self.configuration.reconnectBackoffBase.nanoseconds << Int64(min(streak - 1, 20))
        let capped = min(exponential, self.configuration.reconnectBackoffLimit.nanoseconds)
        return .nanoseconds(Int64.random(in: (capped / 2)...max(capped / 2, capped), using: &random))
    }
}

import Logging
import NIOCore
import NIOSSL
import Synchronization

/// The long-lived HTTP/2 connections for one (environment, credentials) pair.
///
/// The pool counts the requests it has in flight on each connection and compares them with the
/// stream limit each connection reports (see ``APNsConnectionHandler``): a request goes to the
/// connection with the most room, or waits in a queue (bounded, and never past the request's
/// deadline) until a stream finishes or a connection is ready. Connections that close or go away
/// are replaced; after failures, new connections wait for an exponential backoff with jitter, so
/// an unreachable or hostile upstream never sees a rapid connect/close loop.
final class APNsConnectionPool: Sendable {
    struct Configuration: Sendable {
        var endpoint: APNsEndpoint
        var size: Int = 2
        var connection: APNsConnectionHandler.Configuration
        var connectTimeout: TimeAmount = .seconds(10)
        var reconnectBackoffBase: TimeAmount = .milliseconds(100)
        var reconnectBackoffLimit: TimeAmount = .seconds(30)
        var maximumQueuedRequests: Int = 100_000
    }

    /// What one attempt came to, and on which connection.
    struct AttemptResult: Sendable {
        var connectionID: Int?
        var result: Result<APNsResponse, APNsStreamFailure>
    }

    private struct Entry {
        var connection: APNsConnection?
        var limit = 0
        var inFlight = 0
        var hasAnswered = false
        var room: Int { self.connection == nil ? 0 : self.limit - self.inFlight }
    }

    private struct Waiter {
        var request: APNsRequest
        var authorization: String?
        var avoid: Int?
        var deadline: NIODeadline
        var promise: EventLoopPromise<AttemptResult>
    }

    /// How often queued requests are checked against their deadlines. One timer per pool
    /// rather than one per queued request: under load tens of thousands wait, and a scheduled
    /// task each (made, heaped, cancelled) cost more than the send itself.
    static let deadlineSweepInterval: TimeAmount = .milliseconds(250)

    private struct State {
        var entries: [Int: Entry] = [:]
        var connecting = 0
        var nextConnectionID = 1
        /// Requests waiting for room, oldest first.
        var waiters = CircularBuffer<Waiter>()
        var deadlineSweepScheduled = false
        var consecutiveFailures = 0
        var reconnectScheduled = false
        var isShutDown = false
        var connectionsOpened = 0

        var usableConnections: Int { self.entries.values.filter { $0.connection != nil && $0.limit > 0 }.count }
    }

    private let configuration: Configuration
    private let sslContext: NIOSSLContext
    private let group: any EventLoopGroup
    private let logger: Logger
    private let state = Mutex(State())

    init(configuration: Configuration, sslContext: NIOSSLContext, group: any EventLoopGroup, logger: Logger) {
        self.configuration = configuration
        self.sslContext = sslContext
        self.group = group
        self.logger = logger
    }

    /// How many connections were opened so far (tests, metrics).
    var connectionsOpened: Int { self.state.withLock { $0.connectionsOpened } }

    /// Each connection's stream limit and requests in flight, and the queue's length.
    var snapshot: String {
        self.state.withLock { state in
            let connections = state.entries.sorted { $0.key < $1.key }.map { "#\($0.key): \($0.value.inFlight)/\($0.value.limit)" }
            return "connections [\(connections.joined(separator: ", "))], queued \(state.waiters.count), connecting \(state.connecting)"
        }
    }

    /// Connections that are ready and take requests now.
    var usableConnectionCount: Int { self.state.withLock { $0.usableConnections } }

    /// Sends one request on the connection with the most room (other than `avoid`, where
    /// possible), or queues it until `deadline`; a request sent but not answered by `deadline`
    /// has its stream reset. The future always succeeds.
    func execute(
        _ request: APNsRequest,
        authorization: String?,
        avoiding avoid: Int?,
        deadline: NIODeadline,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<AttemptResult> {
        let promise = eventLoop.makePromise(of: AttemptResult.self)
        enum Action {
            case send(APNsConnection)
            /// Queued; whether the deadline sweep must be started.
            case queued(startSweep: Bool)
            case fail(APNsStreamFailure)
        }
        let (action, connect) = self.state.withLock { state -> (Action, ConnectAction) in
            if state.isShutDown { return (.fail(.unprocessed("the upstream client is shut down")), .none) }
            if let id = Self.pickConnection(state.entries, avoiding: avoid) {
                state.entries[id]!.inFlight += 1
                return (.send(state.entries[id]!.connection!), self.connectionsToOpen(&state))
            }
            guard state.waiters.count < self.configuration.maximumQueuedRequests else {
                return (.fail(.unprocessed("too many requests waiting for an upstream connection")), .none)
            }
            state.waiters.append(Waiter(request: request, authorization: authorization, avoid: avoid, deadline: deadline, promise: promise))
            let startSweep = !state.deadlineSweepScheduled
            state.deadlineSweepScheduled = true
            return (.queued(startSweep: startSweep), self.connectionsToOpen(&state))
        }
        switch action {
        case .send(let connection):
            self.send(request, authorization: authorization, deadline: deadline, on: connection, promise: promise)
        case .queued(let startSweep):
            if startSweep {
                self.scheduleDeadlineSweep(on: eventLoop)
            }
        case .fail(let failure):
            promise.succeed(AttemptResult(connectionID: nil, result: .failure(failure)))
        }
        self.openConnections(connect)
        return promise.futureResult
    }

    /// Opens the pool's connections now rather than at the first request (start-up, readiness).
    func warmUp() {
        let action = self.state.withLock { self.connectionsToOpen(&$0) }
        self.openConnections(action)
    }

    func shutdown() {
        let (waiters, connections) = self.state.withLock { state in
            state.isShutDown = true
            let waiters = Array(state.waiters)
            state.waiters.removeAll()
            return (waiters, state.entries.values.compactMap(\.connection))
        }
        for waiter in waiters {
            waiter.promise.succeed(AttemptResult(connectionID: nil, result: .failure(.unprocessed("the upstream client is shut down"))))
        }
        for connection in connections {
            connection.close()
        }
    }

    // MARK: Dispatch

    private static func pickConnection(_ entries: [Int: Entry], avoiding avoid: Int?) -> Int? {
        var best: (id: Int, room: Int)?
        var avoided: Int?
        for (id, entry) in entries where entry.room > 0 {
            if id == avoid {
                avoided = id
                continue
            }
            if best == nil || entry.room > best!.room {
                best = (id, entry.room)
            }
        }
        return best?.id ?? avoided
    }

    private func send(
        _ request: APNsRequest,
        authorization: String?,
        deadline: NIODeadline,
        on connection: APNsConnection,
        promise: EventLoopPromise<AttemptResult>
    ) {
        let id = connection.id
        connection.send(request, authorization: authorization, deadline: deadline).whenComplete { result in
            let attempt: AttemptResult
            switch result {
            case .success(let response):
                attempt = AttemptResult(connectionID: id, result: .success(response))
            case .failure(let error as APNsStreamFailure):
                attempt = AttemptResult(connectionID: id, result: .failure(error))
            case .failure(let error):
                attempt = AttemptResult(connectionID: id, result: .failure(.interrupted("\(error)")))
            }
            self.streamFinished(on: id, answered: attempt.isAnswer)
            promise.succeed(attempt)
        }
    }

    private func streamFinished(on id: Int, answered: Bool) {
        self.state.withLock { state in
            guard state.entries[id] != nil else { return }
            state.entries[id]!.inFlight -= 1
            if answered, !state.entries[id]!.hasAnswered {
                state.entries[id]!.hasAnswered = true
                state.consecutiveFailures = 0
            }
        }
        self.dispatchWaiters()
    }

    /// Moves queued requests onto connections with room, oldest first.
    private func dispatchWaiters() {
        var sends: [(Waiter, APNsConnection)] = []
        self.state.withLock { state in
            while let waiter = state.waiters.first {
                guard let id = Self.pickConnection(state.entries, avoiding: waiter.avoid) else { break }
                state.waiters.removeFirst()
                state.entries[id]!.inFlight += 1
                sends.append((waiter, state.entries[id]!.connection!))
            }
        }
        if !sends.isEmpty {
            self.logger.trace("dispatched queued requests", metadata: ["count": "\(sends.count)"])
        }
        for (waiter, connection) in sends {
            self.send(waiter.request, authorization: waiter.authorization, deadline: waiter.deadline, on: connection, promise: waiter.promise)
        }
    }

    private func scheduleDeadlineSweep(on eventLoop: any EventLoop) {
        eventLoop.scheduleTask(in: Self.deadlineSweepInterval) {
            self.sweepExpiredWaiters(on: eventLoop)
        }
    }

    /// Fails the queued requests whose deadline has passed (at most one sweep interval late);
    /// keeps sweeping while any request waits.
    private func sweepExpiredWaiters(on eventLoop: any EventLoop) {
        let now = NIODeadline.now()
        let (expired, again) = self.state.withLock { state -> ([Waiter], Bool) in
            var expired: [Waiter] = []
            if state.waiters.contains(where: { $0.deadline <= now }) {
                var kept = CircularBuffer<Waiter>(initialCapacity: state.waiters.count)
                for waiter in state.waiters {
                    if waiter.deadline <= now {
                        expired.append(waiter)
                    } else {
                        kept.append(waiter)
                    }
                }
                state.waiters = kept
            }
            state.deadlineSweepScheduled = !state.waiters.isEmpty && !state.isShutDown
            return (expired, state.deadlineSweepScheduled)
        }
        for waiter in expired {
            waiter.promise.succeed(
                AttemptResult(connectionID: nil, result: .failure(.unprocessed("no upstream connection had room before the deadline")))
            )
        }
        if again {
            self.scheduleDeadlineSweep(on: eventLoop)
        }
    }

    // MARK: Connections

    private enum ConnectAction {
        case none
        case open(Int)
        case openAfterBackoff
    }

    /// How many connections to start now (counted as connecting), or whether to start one after
    /// a backoff.
    private func connectionsToOpen(_ state: inout State) -> ConnectAction {
        guard !state.isShutDown, !state.reconnectScheduled else { return .none }
        let live = state.usableConnections + state.connecting
        let wanted = max(0, self.configuration.size - live)
        guard wanted > 0 else { return .none }
        if state.consecutiveFailures > 0 {
            // After a failure, one connection at a time, after a backoff.
            state.reconnectScheduled = true
            return .openAfterBackoff
        }
        state.connecting += wanted
        return .open(wanted)
    }

    private func openConnections(_ action: ConnectAction) {
        switch action {
        case .none:
            return
        case .open(let count):
            for _ in 0..<count {
                self.openConnection()
            }
        case .openAfterBackoff:
            let delay = self.backoff()
            self.logger.info("reconnecting to the upstream after a backoff", metadata: ["delay_ms": "\(delay.nanoseconds / 1_000_000)"])
            self.group.any().scheduleTask(in: delay) {
                let open = self.state.withLock { state -> Bool in
                    state.reconnectScheduled = false
                    guard !state.isShutDown else { return false }
                    state.connecting += 1
                    return true
                }
                if open { self.openConnection() }
            }
        }
    }

    private func backoff() -> TimeAmount {
        let failures = self.state.withLock { $0.consecutiveFailures }
        let base = self.configuration.reconnectBackoffBase.nanoseconds
        let exponential = base << Int64(min(failures - 1, 20))
        let capped = min(exponential, self.configuration.reconnectBackoffLimit.nanoseconds)
        // Full jitter over the upper half: spreads reconnects of many bridges.
        return .nanoseconds(Int64.random(in: (capped / 2)...max(capped / 2, capped)))
    }

    private func openConnection() {
        let id = self.state.withLock { state in
            defer { state.nextConnectionID += 1 }
            return state.nextConnectionID
        }
        APNsConnection.connect(
            id: id,
            endpoint: self.configuration.endpoint,
            sslContext: self.sslContext,
            configuration: self.configuration.connection,
            connectTimeout: self.configuration.connectTimeout,
            eventLoop: self.group.next(),
            logger: self.logger
        ).whenComplete { result in
            switch result {
            case .success(let connection):
                let keep = self.state.withLock { state -> Bool in
                    state.connecting -= 1
                    guard !state.isShutDown else { return false }
                    // One stream until the connection reports its real limit.
                    state.entries[id] = Entry(connection: connection, limit: 1)
                    state.connectionsOpened += 1
                    return true
                }
                guard keep else {
                    connection.close()
                    return
                }
                self.logger.debug("upstream connection ready", metadata: ["upstream_connection": "\(id)"])
                connection.setEvents(
                    limitChanged: { limit in self.limitChanged(on: id, to: limit) },
                    closed: { self.connectionClosed(id) }
                )
            case .failure(let error):
                self.logger.warning(
                    "could not connect to the upstream",
                    metadata: ["endpoint": "\(self.configuration.endpoint.host):\(self.configuration.endpoint.port)", "error": "\(error)"]
                )
                let connect = self.state.withLock { state -> ConnectAction in
                    state.connecting -= 1
                    state.consecutiveFailures += 1
                    return self.connectionsToOpen(&state)
                }
                self.openConnections(connect)
            }
        }
    }

    private func limitChanged(on id: Int, to limit: Int) {
        self.logger.trace("stream limit changed", metadata: ["upstream_connection": "\(id)", "limit": "\(limit)"])
        let connect = self.state.withLock { state -> ConnectAction in
            guard state.entries[id] != nil else { return .none }
            state.entries[id]!.limit = limit
            // A connection going away is replaced at once while there is traffic; an idle pool
            // opens connections when the next request comes.
            let hasTraffic = !state.waiters.isEmpty || state.entries.values.contains { $0.inFlight > 0 }
            return limit == 0 && hasTraffic ? self.connectionsToOpen(&state) : .none
        }
        self.openConnections(connect)
        if limit > 0 {
            self.dispatchWaiters()
        }
    }

    private func connectionClosed(_ id: Int) {
        let connect = self.state.withLock { state -> ConnectAction in
            guard let entry = state.entries.removeValue(forKey: id) else { return .none }
            if !entry.hasAnswered {
                // A connection that closed before answering anything counts as a failure, so
                // that a server which accepts and drops connections is not hammered.
                state.consecutiveFailures += 1
            }
            // Replaced now when requests are waiting; otherwise the next request opens one.
            return state.waiters.isEmpty ? .none : self.connectionsToOpen(&state)
        }
        self.logger.debug("upstream connection closed", metadata: ["upstream_connection": "\(id)"])
        self.openConnections(connect)
    }
}

extension APNsConnectionPool.AttemptResult {
    var isAnswer: Bool {
        if case .success = self.result { return true }
        return false
    }
}

import CoreMetrics
import Logging
import NIOCore
import NIOSSL
import Synchronization

/// The long-lived HTTP/2 connections to one endpoint, for one set of credentials.
///
/// Which connection gets a request, when connections are opened, the queue and the reconnect
/// backoff are an ``APNsConnectionPoolStateMachine``, kept under a lock (requests come from any
/// event loop); this class feeds it events and executes the one action each answers
/// (``execute(_:sweepOn:)``): sends on connections, fails requests, opens connections (now, or
/// after the backoff on a timer), closes connections, sweeps the queue.
final class APNsConnectionPool: Sendable {
    /// One pool's part of the client's configuration (``APNsClient/Configuration``).
    struct Configuration: Sendable {
        var endpoint: APNsEndpoint
        /// This pool's share of the client's connections.
        var size: Int
        /// Its share of the most connections while every stream is taken.
        var maximumSize: Int
        var connection: APNsConnectionConfiguration
        var client: APNsClient.Configuration
    }

    private typealias StateMachine = APNsConnectionPoolStateMachine<APNsConnection, APNsRequestInFlight>

    /// How often queued requests are checked against their deadlines. One timer per pool
    /// rather than one per queued request: under load tens of thousands wait, and a scheduled
    /// task each (made, heaped, cancelled) cost more than the send itself.
    static let deadlineSweepInterval: TimeAmount = .milliseconds(250)

    private let configuration: Configuration
    private let sslContext: NIOSSLContext
    private let group: any EventLoopGroup
    private let logger: Logger
    private let state: Mutex<StateMachine>

    init(configuration: Configuration, sslContext: NIOSSLContext, group: any EventLoopGroup, logger: Logger) {
        self.configuration = configuration
        self.sslContext = sslContext
        self.group = group
        self.logger = logger
        self.state = Mutex(
            StateMachine(
                configuration: .init(
                    configuration.client,
                    size: configuration.size,
                    maximumSize: configuration.maximumSize
                )
            )
        )
    }

    /// How many connections were opened so far (tests, metrics).
    var connectionsOpened: Int { self.state.withLock { $0.connectionsOpened } }

    /// Each connection's stream limit and requests in flight, and the queue's length.
    var snapshot: String { self.state.withLock { $0.snapshot } }

    /// Connections that are ready and take requests now.
    var usableConnectionCount: Int { self.state.withLock { $0.usableConnections } }

    /// The connections by state: usable, draining, connecting.
    var connectionCounts: APNsClient.ConnectionCounts { self.state.withLock { $0.counts } }

    /// Whether a request would be sent at once rather than queued.
    var hasRoom: Bool { self.state.withLock { $0.hasRoom } }

    /// Sends one request's attempt on the connection with the most room (other than `avoid`,
    /// where possible), or queues it until its `deadlines.queued`; a request sent but not
    /// answered within `deadlines.answerTimeout` of its write has its stream reset. The request
    /// is called back once: by its connection (``APNsStreamOwner``), or by the pool when no
    /// connection had it (``APNsRequestInFlight/failedInPool(_:)``). The queue's deadline sweep
    /// runs on the request's event loop.
    func execute(_ inFlight: APNsRequestInFlight, avoiding avoid: Int?) {
        let action = self.state.withLock { state in
            var random = SystemRandomNumberGenerator()
            return state.place(inFlight, avoiding: avoid, deadline: inFlight.deadlines.queued, using: &random)
        }
        self.execute(action, sweepOn: inFlight.eventLoop)
    }

    /// A stream on connection `id` ended (the client, before it reads the attempt's result).
    func streamFinished(on id: Int, answered: Bool) {
        self.execute(self.state.withLock { $0.streamFinished(on: id, answered: answered) })
    }

    /// Opens the pool's connections now rather than at the first request (start-up, readiness).
    func warmUp() {
        let action = self.state.withLock { state in
            var random = SystemRandomNumberGenerator()
            return state.warmUp(using: &random)
        }
        self.execute(action)
    }

    /// Fails the requests still waiting and closes every open connection; the futures complete
    /// when those connections are closed.
    @discardableResult
    func shutdown() -> [EventLoopFuture<Void>] {
        let action = self.state.withLock { $0.shutDown() }
        self.execute(action)
        return action.close.map(\.channel.closeFuture)
    }

    // MARK: Executing the state machine's actions

    /// Does what the machine answered; a queue sweep runs on `sweepOn` (else on any loop).
    private func execute(_ action: StateMachine.Action, sweepOn eventLoop: (any EventLoop)? = nil) {
        if action.send.count > 1 {
            self.logger.trace("dispatched queued requests", metadata: ["count": "\(action.send.count)"])
        }
        for placement in action.send {
            self.send(placement)
        }
        for (inFlight, failure) in action.fail {
            inFlight.failedInPool(failure)
        }
        for connection in action.close {
            connection.close()
        }
        switch action.connect {
        case .none:
            break
        case .open(let ids):
            for id in ids {
                self.openConnection(id)
            }
        case .openAfter(let delay):
            self.logger.info(
                "reconnecting to the upstream after a backoff",
                metadata: ["delay_ms": "\(delay.nanoseconds / 1_000_000)"]
            )
            self.group.any().scheduleTask(in: delay) {
                self.execute(self.state.withLock { $0.reconnectDue() })
            }
        }
        if action.sweepQueue {
            let loop = eventLoop ?? self.group.any()
            // Fails the queued requests whose deadline has passed (at most one sweep interval
            // late); the machine asks for another sweep while any request waits.
            loop.scheduleTask(in: Self.deadlineSweepInterval) {
                self.execute(self.state.withLock { $0.sweepQueue(now: .now()) }, sweepOn: loop)
            }
        }
    }

    private func send(_ placement: StateMachine.Placement) {
        let inFlight = placement.request
        placement.connection.send(
            inFlight.request,
            authorization: inFlight.authorization,
            deadlines: inFlight.deadlines,
            owner: inFlight
        )
    }

    private func openConnection(_ id: Int) {
        APNsConnection.connect(
            id: id,
            endpoint: self.configuration.endpoint,
            sslContext: self.sslContext,
            configuration: self.configuration.connection,
            connectTimeout: self.configuration.client.connectTimeout,
            eventLoop: self.group.next(),
            logger: self.logger
        ).whenComplete { result in
            switch result {
            case .success(let connection):
                let opened = self.state.withLock { $0.connectionOpened(id, connection, now: .now()) }
                self.execute(opened)
                guard opened.close.isEmpty else { return }  // the pool was shut down meanwhile
                self.configuration.connection.metrics.connectionsOpened.increment()
                self.logger.debug("upstream connection ready", metadata: ["upstream_connection": "\(id)"])
                connection.setEvents(
                    limitChanged: { limit in self.limitChanged(on: id, to: limit) },
                    closed: { self.connectionClosed(id) }
                )
            case .failure(let error):
                self.logger.warning(
                    "could not connect to the upstream",
                    metadata: [
                        "endpoint": "\(self.configuration.endpoint.host):\(self.configuration.endpoint.port)",
                        "error": "\(error)",
                    ]
                )
                let action = self.state.withLock { state in
                    var random = SystemRandomNumberGenerator()
                    return state.connectFailed(using: &random)
                }
                self.execute(action)
            }
        }
    }

    private func limitChanged(on id: Int, to limit: Int) {
        self.logger.trace("stream limit changed", metadata: ["upstream_connection": "\(id)", "limit": "\(limit)"])
        let action = self.state.withLock { state in
            var random = SystemRandomNumberGenerator()
            return state.limitChanged(on: id, to: limit, now: .now(), using: &random)
        }
        self.execute(action)
    }

    private func connectionClosed(_ id: Int) {
        let action = self.state.withLock { state in
            var random = SystemRandomNumberGenerator()
            return state.connectionClosed(id, now: .now(), using: &random)
        }
        self.logger.debug("upstream connection closed", metadata: ["upstream_connection": "\(id)"])
        self.execute(action)
    }
}

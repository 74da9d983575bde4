import CoreMetrics
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// An HTTP/2 client of Apple's provider API for one endpoint (an environment's host) and one
/// set of credentials.
///
/// A request goes over a pool of long-lived HTTP/2 connections. The client
/// keeps one pool per event loop, for as many loops as it has connections (two connections on
/// two loops: one pool of one connection on each), and sends a request with the pool of the
/// caller's loop: the request, its answer and the caller stay on one thread, without a hop
/// between loops. When that pool has no free stream (or the caller's loop has no pool), the
/// request goes to a pool that has one. Each attempt's
/// answer or failure is fed to the request's retry state machine, which decides between finishing
/// and trying again (429 and 5xx after a backoff, unprocessed streams at once, an expired
/// authentication token with a fresh one), within the retry budget. The client reports one
/// ``APNsSendResult`` per request; what an answer means to the caller is the caller's business.
///
/// It depends on NIO, NIOHTTP2, NIOSSL, swift-crypto, swift-log and swift-metrics only.
public final class APNsClient: Sendable {
    public struct Configuration: Sendable {
        /// Connections to the endpoint, spread over the event loops (at most one pool per loop).
        public var connectionsPerPool: Int = 2
        /// While every stream is taken and requests wait, more connections are opened, up to
        /// this many (never fewer than ``connectionsPerPool``): a server that allows few streams
        /// per connection is used through more connections. Draining connections (after a
        /// GOAWAY) count against it too (docs/upstream.md#connections).
        public var maximumConnectionsPerPool: Int = 4
        /// The HTTP/2 implementation of the connections; libnghttp2 when the build has it.
        public var engine: APNsHTTP2Engine = .preferred
        /// Our own bound on open streams per connection, whatever the server allows.
        public var maximumStreamsPerConnection: Int = 1000
        public var pingInterval: TimeAmount = .seconds(60)
        public var connectTimeout: TimeAmount = .seconds(10)
        /// How long a request may spend in retries: no attempt is written after it; one written
        /// before it still waits its `requestTimeout` for the answer (docs/upstream.md#deadlines).
        public var retryBudget: TimeAmount = .seconds(30)
        /// How long one attempt may wait for room on a connection, and then, counted from the
        /// moment it is written, for its answer; past either its stream is reset (or it leaves
        /// the queue) and it is retried, within the retry budget. APNs answers in milliseconds;
        /// an upstream that answers PINGs but not a stream must not hold a request until the
        /// budget is gone on one attempt. Counting the answer's wait from the write keeps a
        /// slow APNs (answers after seconds) from having requests reset just before their
        /// answers and delivered twice.
        public var requestTimeout: TimeAmount = .seconds(10)
        public var reconnectBackoffBase: TimeAmount = .milliseconds(100)
        public var reconnectBackoffLimit: TimeAmount = .seconds(30)
        /// A connection that goes away (GOAWAY, or closed after answering) sooner than this
        /// after opening is replaced after the reconnect backoff, like a failed connect: an
        /// upstream that sends GOAWAY after each answer is not hammered
        /// (docs/upstream.md#connections).
        public var shortLivedConnectionWindow: TimeAmount = .seconds(10)
        /// More refused streams than this in 30 s and a connection is replaced.
        public var refusedStreamLimit: Int = 100
        public var maximumQueuedRequests: Int = 100_000
        /// The first delay of a retry after 429 / 5xx; it doubles each time, with jitter.
        public var retryBackoffBase: TimeAmount = .milliseconds(50)
        public var retryBackoffLimit: TimeAmount = .seconds(5)
        /// Answer bodies are cut to this length: an error's JSON is small; a channel management
        /// client reading the list of up to 10,000 channels needs about 500 KB.
        public var maximumResponseBodyLength: Int = 2048

        /// The start of every metric's name (``APNsClientMetrics``).
        public var metricsPrefix: String = APNsClientMetrics.defaultPrefix

        public init() {}

        var retryPolicy: RequestRetryStateMachine.Policy {
            RequestRetryStateMachine.Policy(
                budget: self.retryBudget,
                requestTimeout: self.requestTimeout,
                backoffBase: self.retryBackoffBase,
                backoffLimit: self.retryBackoffLimit
            )
        }
    }

    public let endpoint: APNsEndpoint
    private let configuration: Configuration
    private let credentials: APNsCredentials
    private let logger: Logger
    private let metrics: APNsClientMetrics
    /// One pool per event loop that has connections, in the order of the group's loops.
    private let pools: [APNsConnectionPool]
    /// The loops of the pools, as identities: a loop's pool is found by a scan of these (as
    /// many as the machine's cores at most), cheaper than hashing it in a dictionary.
    private let poolLoops: [ObjectIdentifier]
    /// The loops of the pools, in order (an async caller on none of them starts at the first).
    let eventLoops: [any EventLoop]
    /// Set by ``shutdown()``: no attempt starts after it.
    private let isShutDown = Atomic<Bool>(false)

    /// - Parameters:
    ///   - endpoint: the host and port of one environment (``APNsEndpoint``).
    ///   - configuration: connections, streams, timeouts, the retry budget and the metric names.
    ///   - credentials: a authentication token signer or a client certificate.
    ///   - group: the event loops the connections run on.
    ///   - logger: where the client logs (connections, GOAWAYs, credential problems).
    ///   - metricsFactory: where the client's metrics go; swift-metrics' global factory unless
    ///     given.
    public init(
        endpoint: APNsEndpoint,
        configuration: Configuration = Configuration(),
        credentials: APNsCredentials,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns-client"),
        metricsFactory: any MetricsFactory = MetricsSystem.factory
    ) throws {
        self.endpoint = endpoint
        self.configuration = configuration
        self.credentials = credentials
        self.logger = logger
        self.metrics = APNsClientMetrics(prefix: configuration.metricsPrefix, factory: metricsFactory)
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2"]
        if let trustRoots = endpoint.trustRoots {
            tls.trustRoots = trustRoots
        }
        if case .certificate(let chain, let key) = credentials {
            tls.certificateChain = chain.map { .certificate($0) }
            tls.privateKey = .privateKey(key)
        }
        let connection = APNsConnectionConfiguration(
            authority: endpoint.authority,
            client: configuration,
            usesAuthenticationTokens: credentials.usesAuthenticationTokens,
            metrics: self.metrics
        )
        let sslContext = try NIOSSLContext(configuration: tls)
        // One pool per loop, as many loops as there are connections; the connections are spread
        // evenly (3 connections on 2 loops: 2 and 1).
        let loops = Array(group.makeIterator().prefix(max(1, configuration.connectionsPerPool)))
        var pools: [APNsConnectionPool] = []
        for (index, loop) in loops.enumerated() {
            func share(of count: Int) -> Int {
                max(1, count / loops.count + (index < count % loops.count ? 1 : 0))
            }
            pools.append(
                APNsConnectionPool(
                    configuration: .init(
                        endpoint: endpoint,
                        size: share(of: configuration.connectionsPerPool),
                        // (never below its size: the pool's configuration sees to that)
                        maximumSize: share(of: configuration.maximumConnectionsPerPool),
                        connection: connection,
                        client: configuration
                    ),
                    sslContext: sslContext,
                    group: loop,
                    logger: logger
                )
            )
        }
        self.pools = pools
        self.poolLoops = loops.map { ObjectIdentifier($0) }
        self.eventLoops = loops
    }

    /// Connections opened so far.
    public var connectionsOpened: Int { self.pools.reduce(0) { $0 + $1.connectionsOpened } }

    /// Connections taking requests now.
    public var usableConnectionCount: Int { self.pools.reduce(0) { $0 + $1.usableConnectionCount } }

    /// The connections by state (the `apns_bridge_upstream_connections` gauge's `state`).
    public struct ConnectionCounts: Sendable, Hashable {
        /// Taking requests now.
        public var usable = 0
        /// Open and taking nothing new: going away (GOAWAY) until their streams end.
        public var draining = 0
        /// Being set up (TCP, TLS, the first SETTINGS).
        public var connecting = 0

        public init() {}

        public static func + (lhs: Self, rhs: Self) -> Self {
            var sum = lhs
            sum.usable += rhs.usable
            sum.draining += rhs.draining
            sum.connecting += rhs.connecting
            return sum
        }
    }

    /// The connections of every pool by state.
    public var connectionCounts: ConnectionCounts {
        self.pools.reduce(ConnectionCounts()) { $0 + $1.connectionCounts }
    }

    /// Whether a connection takes requests now (readiness).
    public var hasUsableConnection: Bool { self.pools.contains { $0.usableConnectionCount > 0 } }

    /// Opens the connections now rather than at the first request.
    public func warmUp() {
        for pool in self.pools { pool.warmUp() }
    }

    /// The connections (requests in flight / stream limit) and the queue, for diagnostics.
    public var poolSnapshot: String {
        self.pools.count == 1
            ? self.pools[0].snapshot
            : self.pools.enumerated().map { "loop \($0.offset): \($0.element.snapshot)" }.joined(separator: "; ")
    }

    /// Closes every connection; requests still waiting, and any sent afterwards, fail at once
    /// with ``APNsSendFailure/Kind/clientShutDown`` (not retried).
    public func shutdown() {
        self.isShutDown.store(true, ordering: .releasing)
        for pool in self.pools { pool.shutdown() }
    }

    /// ``shutdown()``, then waits until the connections that were open are closed.
    public func shutdownAndWait() async {
        self.isShutDown.store(true, ordering: .releasing)
        let closed = self.pools.flatMap { $0.shutdown() }
        for future in closed {
            try? await future.get()
        }
    }

    /// The pool an attempt from `eventLoop` goes to: the loop's own while it has a free stream,
    /// else one that has (the next loops' first), else the loop's own (or the first), which
    /// queues it. A retry prefers a pool other than its last attempt's, so that it goes out on
    /// another connection where one has room (docs/upstream.md#requests).
    private func poolIndex(for eventLoop: any EventLoop, avoiding avoided: Int?) -> Int {
        if self.pools.count == 1 { return 0 }
        let local = self.poolLoops.firstIndex(of: ObjectIdentifier(eventLoop))
        if let local, local != avoided, self.pools[local].hasRoom { return local }
        let start = (local ?? 0) + 1
        for offset in 0..<self.pools.count {
            let index = (start + offset) % self.pools.count
            if index != avoided, self.pools[index].hasRoom { return index }
        }
        return local ?? 0
    }

    /// Sends one request, with the client's retries, and calls `completion` once with the
    /// result and the attempts it took (``APNsSendSummary``): on the event loop of the
    /// connection that answered (`eventLoop` itself while its pool has room), or on `eventLoop`
    /// when no connection did. No future is made: for callers that have their own. The async,
    /// future and one-argument forms are in APNsClient+Forms.swift.
    public func send(
        _ request: APNsRequest,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (APNsSendResult, APNsSendSummary) -> Void
    ) {
        if let name = request.unsendableHeader {
            // Never on the wire: a peer would refuse it with PROTOCOL_ERROR, possibly closing a
            // connection other requests' streams use. It fails alone, at once.
            self.logger.error(
                "a request has a header value HTTP/2 cannot carry; not sent",
                metadata: ["header": "\(name)", "apns-id": "\(request.apnsID)"]
            )
            completion(
                .unanswered(
                    APNsSendFailure(
                        kind: .malformedHeader(name: name),
                        detail: "\(name) has a control character or surrounding white space"
                    ),
                    lastResponse: nil
                ),
                APNsSendSummary(attempts: 0, sentAt: .now(), elapsed: .zero)
            )
            return
        }
        let now = NIODeadline.now()
        let inFlight = APNsRequestInFlight(
            request: request,
            machine: RequestRetryStateMachine(
                policy: self.configuration.retryPolicy,
                startedAt: now,
                expiration: request.expiration
            ),
            startedAt: now,
            client: self,
            eventLoop: eventLoop,
            completion: completion
        )
        self.attempt(inFlight, freshToken: false, now: now)
    }

    // MARK: Attempts

    /// Starts an attempt: a authentication token, the deadlines, a pool. The request is the pool's
    /// from here on, until it is called back (``attemptEnded(_:_:)``). `now`: the clock read
    /// that starts it (the first attempt's is the request's own).
    private func attempt(_ inFlight: APNsRequestInFlight, freshToken: Bool, now started: NIODeadline) {
        guard !self.isShutDown.load(ordering: .acquiring) else {
            inFlight.complete(
                .unanswered(
                    APNsSendFailure(kind: .clientShutDown, detail: "the client is shut down"),
                    lastResponse: nil
                ),
                now: .now()
            )
            return
        }
        if case .token(let source) = self.credentials {
            do {
                let token =
                    if freshToken, let used = inFlight.tokenGeneration {
                        try source.tokenAfterExpiry(of: used)
                    } else {
                        try source.currentToken()
                    }
                inFlight.authorization = token.authorization
                inFlight.tokenGeneration = token.generation
            } catch {
                self.logger.critical("cannot sign a authentication token", metadata: ["error": "\(error)"])
                let failure = APNsSendFailure(kind: .cannotSignAuthenticationToken, detail: "\(error)")
                inFlight.complete(.unanswered(failure, lastResponse: nil), now: .now())
                return
            }
        }
        inFlight.started = started
        inFlight.deadlines = inFlight.machine.attemptStarted(now: started)
        let poolIndex = self.poolIndex(for: inFlight.eventLoop, avoiding: inFlight.avoid?.pool)
        inFlight.poolIndex = poolIndex
        let avoid = inFlight.avoid.flatMap { $0.pool == poolIndex ? $0.connection : nil }
        self.pools[poolIndex].execute(inFlight, avoiding: avoid)
    }

    /// An attempt ended: answered or not by its connection (which the pool then counts as
    /// free), or failed by the pool before any connection had it (no `connectionID`).
    /// Accepted, the request is done; otherwise its retry state machine decides.
    func attemptEnded(
        _ inFlight: APNsRequestInFlight,
        _ result: Result<APNsResponse, APNsStreamFailure>,
        onConnection connectionID: Int?
    ) {
        if let connectionID {
            let answered = if case .success = result { true } else { false }
            self.pools[inFlight.poolIndex].streamFinished(on: connectionID, answered: answered)
        }
        let now = NIODeadline.now()
        if case .success(let response) = result, response.isAccepted {
            // The common case: no decision to make, nothing to log.
            self.metrics.attemptAnswered(status: response.status, after: (now - inFlight.started).nanoseconds)
            inFlight.complete(.answered(response), now: now)
            return
        }
        inFlight.avoid = connectionID.map { (inFlight.poolIndex, $0) }
        let unixTime = Date().timeIntervalSince1970
        var random = SystemRandomNumberGenerator()
        let action: RequestRetryStateMachine.Action
        switch result {
        case .success(let response):
            self.metrics.attemptAnswered(status: response.status, after: (now - inFlight.started).nanoseconds)
            action = inFlight.machine.answered(response, now: now, unixTime: unixTime, using: &random)
        case .failure(let failure):
            action = inFlight.machine.failed(failure, now: now, unixTime: unixTime, using: &random)
            self.logger.debug(
                "an attempt got no answer",
                metadata: ["apns-id": "\(inFlight.request.apnsID)", "failure": "\(failure)"]
            )
        }
        switch action {
        case .finish(let result):
            inFlight.complete(result, now: now)
        case .retry(let delay, let freshToken):
            self.metrics.retried()
            self.logger.debug(
                "retrying",
                metadata: [
                    "apns-id": "\(inFlight.request.apnsID)", "attempt": "\(inFlight.machine.attempts + 1)",
                    "delay_ms": "\(delay.nanoseconds / 1_000_000)",
                ]
            )
            if delay == .zero {
                self.attempt(inFlight, freshToken: freshToken, now: now)
            } else {
                inFlight.eventLoop.scheduleTask(in: delay) {
                    self.attempt(inFlight, freshToken: freshToken, now: .now())
                }
            }
        }
    }
}

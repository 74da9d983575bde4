import CoreMetrics
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// An HTTP/2 client of Apple's provider API for one endpoint (an environment's host) and one
/// set of credentials.
///
/// A request goes over a pool of long-lived connections (``APNsConnectionPool``); each attempt's
/// answer or failure is fed to a ``RequestRetryStateMachine``, which decides between finishing
/// and trying again (429 and 5xx after a backoff, unprocessed streams at once, an expired
/// provider token with a fresh one), within the retry budget. The client reports one
/// ``APNsSendResult`` per request; what an answer means to the caller is the caller's business.
///
/// It depends on NIO, NIOHTTP2, NIOSSL, swift-crypto, swift-log and swift-metrics only.
public final class APNsClient: Sendable {
    public struct Configuration: Sendable {
        /// Connections to the endpoint.
        public var connectionsPerPool: Int = 2
        /// Our own bound on open streams per connection, whatever the server allows.
        public var maximumStreamsPerConnection: Int = 1000
        public var pingInterval: TimeAmount = .seconds(60)
        public var connectTimeout: TimeAmount = .seconds(10)
        /// How long a request may spend in retries: it bounds the whole wait, answered or not.
        public var retryBudget: TimeAmount = .seconds(30)
        /// How long one attempt may wait for its answer (or for room on a connection) before
        /// its stream is reset and it is retried, within the retry budget. APNs answers in
        /// milliseconds; an upstream that answers PINGs but not a stream must not hold a
        /// request until the budget is gone on one attempt.
        public var requestTimeout: TimeAmount = .seconds(10)
        public var reconnectBackoffBase: TimeAmount = .milliseconds(100)
        public var reconnectBackoffLimit: TimeAmount = .seconds(30)
        /// More refused streams than this in 30 s and a connection is replaced.
        public var refusedStreamLimit: Int = 100
        public var maximumQueuedRequests: Int = 100_000
        /// The first delay of a retry after 429 / 5xx; it doubles each time, with jitter.
        public var retryBackoffBase: TimeAmount = .milliseconds(50)
        public var retryBackoffLimit: TimeAmount = .seconds(5)
        /// Answer bodies are cut to this length: an error's JSON is small; a channel management
        /// client reading the list of up to 10,000 channels needs about 500 KB.
        public var maximumResponseBodyLength: Int = 2048

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
    private let pool: APNsConnectionPool

    /// - Parameter metricsFactory: where the client's metrics go; swift-metrics' global factory
    ///   unless given.
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
        self.metrics = APNsClientMetrics(factory: metricsFactory)
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
        var connectionState = APNsConnectionStateMachine<EventLoopPromise<APNsResponse>>.Configuration()
        connectionState.maximumStreams = configuration.maximumStreamsPerConnection
        connectionState.oneStreamUntilFirstSuccess = credentials.usesProviderTokens
        connectionState.refusedStreamLimit = configuration.refusedStreamLimit
        connectionState.maximumResponseBodyLength = configuration.maximumResponseBodyLength
        let connection = APNsConnectionHandler.Configuration(
            authority: endpoint.authority,
            stateMachine: connectionState,
            pingInterval: configuration.pingInterval,
            metrics: self.metrics
        )
        self.pool = APNsConnectionPool(
            configuration: .init(
                endpoint: endpoint,
                size: configuration.connectionsPerPool,
                connection: connection,
                connectTimeout: configuration.connectTimeout,
                reconnectBackoffBase: configuration.reconnectBackoffBase,
                reconnectBackoffLimit: configuration.reconnectBackoffLimit,
                maximumQueuedRequests: configuration.maximumQueuedRequests
            ),
            sslContext: try NIOSSLContext(configuration: tls),
            group: group,
            logger: logger
        )
    }

    /// Connections opened so far.
    public var connectionsOpened: Int { self.pool.connectionsOpened }

    /// Connections taking requests now.
    public var usableConnectionCount: Int { self.pool.usableConnectionCount }

    /// Whether a connection takes requests now (readiness).
    public var hasUsableConnection: Bool { self.pool.usableConnectionCount > 0 }

    /// Opens the connections now rather than at the first request.
    public func warmUp() { self.pool.warmUp() }

    /// The connections (requests in flight / stream limit) and the queue, for diagnostics.
    public var poolSnapshot: String { self.pool.snapshot }

    /// Closes every connection; requests still waiting fail.
    public func shutdown() { self.pool.shutdown() }

    /// Sends one request, with the client's retries; the future always succeeds, on `eventLoop`.
    public func send(_ request: APNsRequest, on eventLoop: any EventLoop) -> EventLoopFuture<APNsSendResult> {
        let promise = eventLoop.makePromise(of: APNsSendResult.self)
        let machine = RequestRetryStateMachine(policy: self.configuration.retryPolicy, startedAt: .now(), expiration: request.expiration)
        self.attempt(Attempt(request: request, machine: machine), freshToken: false, on: eventLoop, promise: promise)
        return promise.futureResult
    }

    // MARK: Attempts

    /// One request between its attempts.
    private struct Attempt: Sendable {
        var request: APNsRequest
        var machine: RequestRetryStateMachine
        /// The connection of the last attempt: a retry goes elsewhere where possible.
        var avoid: Int?
        /// The provider token generation the last attempt used.
        var tokenGeneration: Int?
    }

    private func attempt(_ attempt: Attempt, freshToken: Bool, on eventLoop: any EventLoop, promise: EventLoopPromise<APNsSendResult>) {
        var attempt = attempt
        var authorization: String?
        if case .token(let source) = self.credentials {
            do {
                let token =
                    if freshToken, let used = attempt.tokenGeneration {
                        try source.tokenAfterExpiry(of: used)
                    } else {
                        try source.currentToken()
                    }
                authorization = token.authorization
                attempt.tokenGeneration = token.generation
            } catch {
                self.logger.critical("cannot sign a provider token", metadata: ["error": "\(error)"])
                let failure = APNsSendFailure(kind: .cannotSignProviderToken, detail: "\(error)")
                promise.succeed(.unanswered(failure, lastResponse: nil))
                return
            }
        }
        let started = NIODeadline.now()
        let deadline = attempt.machine.attemptStarted(now: started)
        let sent = attempt
        self.pool.execute(attempt.request, authorization: authorization, avoiding: attempt.avoid, deadline: deadline, on: eventLoop)
            .whenSuccess { result in
                var attempt = sent
                attempt.avoid = result.connectionID
                let now = NIODeadline.now()
                let unixTime = Date().timeIntervalSince1970
                var random = SystemRandomNumberGenerator()
                let action: RequestRetryStateMachine.Action
                switch result.result {
                case .success(let response):
                    self.metrics.attemptAnswered(status: response.status, after: (now - started).nanoseconds)
                    if response.status == 200 {
                        // The common case: no decision to make, nothing to log.
                        promise.succeed(.answered(response))
                        return
                    }
                    action = attempt.machine.answered(response, now: now, unixTime: unixTime, using: &random)
                case .failure(let failure):
                    action = attempt.machine.failed(failure, now: now, unixTime: unixTime, using: &random)
                    self.logger.debug("an attempt got no answer", metadata: ["apns-id": "\(attempt.request.apnsID)", "failure": "\(failure)"])
                }
                self.execute(action, attempt: attempt, on: eventLoop, promise: promise)
            }
    }

    private func execute(_ action: RequestRetryStateMachine.Action, attempt: Attempt, on eventLoop: any EventLoop, promise: EventLoopPromise<APNsSendResult>) {
        switch action {
        case .finish(let result):
            promise.succeed(result)
        case .retry(let delay, let freshToken):
            self.metrics.retried()
            self.logger.debug(
                "retrying",
                metadata: ["apns-id": "\(attempt.request.apnsID)", "attempt": "\(attempt.machine.attempts + 1)", "delay_ms": "\(delay.nanoseconds / 1_000_000)"]
            )
            if delay == .zero {
                self.attempt(attempt, freshToken: freshToken, on: eventLoop, promise: promise)
            } else {
                eventLoop.scheduleTask(in: delay) {
                    self.attempt(attempt, freshToken: freshToken, on: eventLoop, promise: promise)
                }
            }
        }
    }
}

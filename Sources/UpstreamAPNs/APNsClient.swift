import BridgeCore
import Foundation
import LegacyProtocol
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// The HTTP/2 APNs client: fills the gateway's ``NotificationUpstream`` seam.
///
/// Each notification becomes one ``APNsRequest`` (its `apns-id` kept across retries) sent over
/// the pool of its tenant's (environment, credentials). Answers are classified by
/// ``UpstreamResponseClassification`` (CONTRACT §1.7); the client retries what may be retried
/// within the retry budget and reports one final ``NotificationOutcome``.
public final class APNsClient: NotificationUpstream {
    public struct Configuration: Sendable {
        /// Where each environment is reached (Apple's hosts by default).
        public var endpoints: [APNsEnvironment: APNsEndpoint] = [
            .production: .production, .sandbox: .sandbox,
        ]
        /// Connections per (environment, credentials).
        public var connectionsPerPool: Int = 2
        /// Our own bound on open streams per connection, whatever the server allows.
        public var maximumStreamsPerConnection: Int = 1000
        public var pingInterval: TimeAmount = .seconds(60)
        public var connectTimeout: TimeAmount = .seconds(10)
        /// How long a notification may spend in retries (CONTRACT §1.7): it bounds the whole
        /// wait, answered or not.
        public var retryBudget: TimeAmount = .seconds(30)
        /// How long one attempt may wait for its answer (or for room on a connection) before
        /// its stream is reset and it is retried, within the retry budget. APNs answers in
        /// milliseconds; an upstream that answers PINGs but not a stream must not hold a
        /// notification until the budget is gone on one attempt.
        public var requestTimeout: TimeAmount = .seconds(10)
        public var reconnectBackoffBase: TimeAmount = .milliseconds(100)
        public var reconnectBackoffLimit: TimeAmount = .seconds(30)
        /// More refused streams than this in 30 s and a connection is replaced.
        public var refusedStreamLimit: Int = 100
        public var maximumQueuedRequests: Int = 100_000
        /// The first delay of a retry after 429 / 5xx; it doubles each time, with jitter.
        public var retryBackoffBase: TimeAmount = .milliseconds(50)
        public var retryBackoffLimit: TimeAmount = .seconds(5)

        public init() {}
    }

    /// Counters for tests and (later) metrics.
    public struct Statistics: Sendable, Hashable {
        public var requests = 0
        public var retries = 0
        public var credentialFailures = 0
        public var bridgeBugs = 0
        public var droppedAfterRetries = 0
    }

    private let configuration: Configuration
    private let credentials: APNsCredentials
    private let group: any EventLoopGroup
    private let logger: Logger
    private let idGenerator = APNsIDGenerator()
    private let pools: [APNsEnvironment: APNsConnectionPool]
    private let statistics = Mutex(Statistics())

    public init(
        configuration: Configuration,
        credentials: APNsCredentials,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns-bridge.upstream")
    ) throws {
        self.configuration = configuration
        self.credentials = credentials
        self.group = group
        self.logger = logger
        var pools: [APNsEnvironment: APNsConnectionPool] = [:]
        for (environment, endpoint) in configuration.endpoints {
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
            var poolLogger = logger
            poolLogger[metadataKey: "environment"] = "\(environment.rawValue)"
            let connection = APNsConnectionHandler.Configuration(
                authority: endpoint.authority,
                maximumStreams: configuration.maximumStreamsPerConnection,
                oneStreamUntilFirstSuccess: credentials.usesProviderTokens,
                pingInterval: configuration.pingInterval,
                refusedStreamLimit: configuration.refusedStreamLimit
            )
            pools[environment] = APNsConnectionPool(
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
                logger: poolLogger
            )
        }
        self.pools = pools
    }

    public var currentStatistics: Statistics { self.statistics.withLock { $0 } }

    /// Connections opened so far in an environment's pool.
    public func connectionsOpened(_ environment: APNsEnvironment) -> Int {
        self.pools[environment]?.connectionsOpened ?? 0
    }

    /// Connections of an environment taking requests now (metrics).
    public func usableConnectionCount(_ environment: APNsEnvironment) -> Int {
        self.pools[environment]?.usableConnectionCount ?? 0
    }

    /// Whether an environment has a connection taking requests now (for readiness).
    public func hasUsableConnection(_ environment: APNsEnvironment) -> Bool {
        (self.pools[environment]?.usableConnectionCount ?? 0) > 0
    }

    /// Opens an environment's connections now rather than at its first notification.
    public func warmUp(_ environment: APNsEnvironment) {
        self.pools[environment]?.warmUp()
    }

    /// Each pool's connections (requests in flight / stream limit) and queue, for diagnostics.
    public var poolSnapshot: String {
        self.pools.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue): \($0.value.snapshot)" }.joined(separator: "; ")
    }

    /// Closes every connection; requests still waiting fail.
    public func shutdown() {
        for pool in self.pools.values {
            pool.shutdown()
        }
    }

    // MARK: NotificationUpstream

    public func send(_ notification: UpstreamNotification, on eventLoop: any EventLoop) -> EventLoopFuture<NotificationOutcome> {
        let request = APNsRequest(notification, apnsID: self.idGenerator.next())
        return self.send(request, environment: notification.tenant.environment, on: eventLoop)
    }

    /// Sends one prepared request; used by ``send(_:on:)`` and by tools that talk APNs directly.
    public func send(_ request: APNsRequest, environment: APNsEnvironment, on eventLoop: any EventLoop) -> EventLoopFuture<NotificationOutcome> {
        guard let pool = self.pools[environment] else {
            self.logger.error("no upstream endpoint for the environment", metadata: ["environment": "\(environment.rawValue)"])
            UpstreamMetrics.shared.finished(.rejected(.processingError), reason: nil)
            return eventLoop.makeSucceededFuture(.rejected(.processingError))
        }
        self.statistics.withLock { $0.requests += 1 }
        self.logger.debug(
            "forwarding",
            metadata: ["identifier": "\(request.legacyIdentifier)", "apns-id": "\(request.apnsID)", "push_type": "\(request.pushType)"]
        )
        let promise = eventLoop.makePromise(of: NotificationOutcome.self)
        let attempt = Attempt(request: request, deadline: .now() + self.configuration.retryBudget)
        self.run(attempt, pool: pool, on: eventLoop, promise: promise)
        return promise.futureResult
    }

    // MARK: Retries

    private struct Attempt: Sendable {
        var request: APNsRequest
        var deadline: NIODeadline
        var number = 1
        var avoid: Int?
        var tokenGeneration: Int?
        var credentialRetryUsed = false
        var immediateRetries = 0
        /// What the notification becomes if the budget runs out now: status 1, or dropped when
        /// the last answer was 429 (CONTRACT §1.7), also if a later attempt then went unanswered.
        var exhaustedOutcome: NotificationOutcome = .rejected(.processingError)
    }

    private func run(_ attempt: Attempt, pool: APNsConnectionPool, on eventLoop: any EventLoop, promise: EventLoopPromise<NotificationOutcome>) {
        var attempt = attempt
        var authorization: String?
        if case .token(let source) = self.credentials {
            do {
                let token = try (attempt.tokenGeneration.map { try source.tokenAfterExpiry(of: $0) } ?? source.currentToken())
                authorization = token.authorization
                attempt.tokenGeneration = token.generation
            } catch {
                self.logger.critical("cannot sign a provider token", metadata: ["error": "\(error)"])
                UpstreamMetrics.shared.finished(.rejected(.processingError), reason: nil)
                promise.succeed(.rejected(.processingError))
                return
            }
        }
        let usedGeneration = attempt.tokenGeneration
        let sent = attempt
        let started = NIODeadline.now()
        let attemptDeadline = min(started + self.configuration.requestTimeout, attempt.deadline)
        pool.execute(attempt.request, authorization: authorization, avoiding: attempt.avoid, deadline: attemptDeadline, on: eventLoop)
            .whenSuccess { result in
                var attempt = sent
                attempt.avoid = result.connectionID
                switch result.result {
                case .success(let response):
                    UpstreamMetrics.shared.attemptAnswered(status: response.status, after: (NIODeadline.now() - started).nanoseconds)
                    self.handle(response, attempt: attempt, usedGeneration: usedGeneration, pool: pool, on: eventLoop, promise: promise)
                case .failure(let failure):
                    self.handle(failure, attempt: attempt, pool: pool, on: eventLoop, promise: promise)
                }
            }
    }

    private func handle(
        _ response: APNsResponse,
        attempt: Attempt,
        usedGeneration: Int?,
        pool: APNsConnectionPool,
        on eventLoop: any EventLoop,
        promise: EventLoopPromise<NotificationOutcome>
    ) {
        let request = attempt.request
        let classification = response.classification
        if case .final(.accepted) = classification {
            // The common case: nothing to log, no metadata to build.
            UpstreamMetrics.shared.finished(.accepted, reason: nil)
            promise.succeed(.accepted)
            return
        }
        var metadata: Logger.Metadata = [
            "identifier": "\(request.legacyIdentifier)", "apns-id": "\(request.apnsID)", "status": "\(response.status)",
        ]
        if let reason = response.reason { metadata["reason"] = "\(reason)" }
        switch classification {
        case .final(let outcome):
            self.logger.debug("upstream answered", metadata: metadata)
            UpstreamMetrics.shared.finished(outcome, reason: response.reason)
            promise.succeed(outcome)
        case .refreshCredentialsAndRetry:
            guard !attempt.credentialRetryUsed else {
                self.logger.error("upstream refused the provider token again after a refresh", metadata: metadata)
                self.statistics.withLock { $0.credentialFailures += 1 }
                UpstreamMetrics.shared.finished(.rejected(.processingError), reason: response.reason)
                promise.succeed(.rejected(.processingError))
                return
            }
            var next = attempt
            next.credentialRetryUsed = true
            next.number += 1
            // Only ExpiredProviderToken asks for a new token; for the others the current one is
            // reused (TooManyProviderTokenUpdates) or the connection is replaced (IdleTimeout).
            next.tokenGeneration = response.reason == .expiredProviderToken ? usedGeneration : nil
            self.logger.info("retrying with a fresh provider token", metadata: metadata)
            self.statistics.withLock { $0.retries += 1 }
            UpstreamMetrics.shared.retried()
            self.run(next, pool: pool, on: eventLoop, promise: promise)
        case .retry(let exhausted):
            let delay = self.retryDelay(afterAttempt: attempt.number)
            guard self.mayRetry(attempt, after: delay) else {
                self.logger.warning("gave up after retries", metadata: metadata.merging(["outcome": "\(exhausted)"]) { $1 })
                self.statistics.withLock { $0.droppedAfterRetries += 1 }
                UpstreamMetrics.shared.finished(exhausted, reason: response.reason)
                promise.succeed(exhausted)
                return
            }
            self.logger.debug("retrying after an upstream error", metadata: metadata)
            var next = attempt
            next.exhaustedOutcome = exhausted
            self.retry(next, after: delay, pool: pool, on: eventLoop, promise: promise)
        case .credentialFailure:
            self.logger.error("upstream refused the bridge's credentials: check the tenant's key or certificate", metadata: metadata)
            self.statistics.withLock { $0.credentialFailures += 1 }
            UpstreamMetrics.shared.finished(classification.outcomeWithoutRetry, reason: response.reason)
            promise.succeed(classification.outcomeWithoutRetry)
        case .topicFailure:
            self.logger.error("upstream refused the tenant's topic: check the tenant's configuration", metadata: metadata)
            UpstreamMetrics.shared.finished(classification.outcomeWithoutRetry, reason: response.reason)
            promise.succeed(classification.outcomeWithoutRetry)
        case .bridgeBug:
            self.logger.critical("upstream refused a request the bridge built: this is a bug in apns-bridge", metadata: metadata)
            self.statistics.withLock { $0.bridgeBugs += 1 }
            UpstreamMetrics.shared.finished(classification.outcomeWithoutRetry, reason: response.reason)
            promise.succeed(classification.outcomeWithoutRetry)
        }
    }

    private func handle(
        _ failure: APNsStreamFailure,
        attempt: Attempt,
        pool: APNsConnectionPool,
        on eventLoop: any EventLoop,
        promise: EventLoopPromise<NotificationOutcome>
    ) {
        let metadata: Logger.Metadata = [
            "identifier": "\(attempt.request.legacyIdentifier)", "apns-id": "\(attempt.request.apnsID)", "failure": "\(failure)",
        ]
        // Unprocessed requests go again at once (on another connection), a couple of times;
        // after that, and after interrupted ones, with a backoff.
        let immediate = failure.kind == .unprocessed && attempt.immediateRetries < 2
        let delay = immediate ? .zero : self.retryDelay(afterAttempt: attempt.number)
        guard self.mayRetry(attempt, after: delay) else {
            self.logger.warning("gave up: no answer from the upstream within the retry budget", metadata: metadata)
            self.statistics.withLock { $0.droppedAfterRetries += 1 }
            UpstreamMetrics.shared.finished(attempt.exhaustedOutcome, reason: nil)
            promise.succeed(attempt.exhaustedOutcome)
            return
        }
        var next = attempt
        if immediate { next.immediateRetries += 1 }
        self.logger.debug("retrying a request the upstream did not answer", metadata: metadata)
        self.retry(next, after: delay, pool: pool, on: eventLoop, promise: promise)
    }

    private func retry(_ attempt: Attempt, after delay: TimeAmount, pool: APNsConnectionPool, on eventLoop: any EventLoop, promise: EventLoopPromise<NotificationOutcome>) {
        var next = attempt
        next.number += 1
        next.tokenGeneration = nil
        self.statistics.withLock { $0.retries += 1 }
        UpstreamMetrics.shared.retried()
        if delay == .zero {
            self.run(next, pool: pool, on: eventLoop, promise: promise)
        } else {
            let scheduled = next
            eventLoop.scheduleTask(in: delay) {
                self.run(scheduled, pool: pool, on: eventLoop, promise: promise)
            }
        }
    }

    private func mayRetry(_ attempt: Attempt, after delay: TimeAmount) -> Bool {
        if NIODeadline.now() + delay >= attempt.deadline { return false }
        let expiration = attempt.request.expiration
        if expiration != 0, Date().timeIntervalSince1970 + Double(delay.nanoseconds) / 1e9 > Double(expiration) {
            return false
        }
        return true
    }

    /// Exponential backoff with jitter: base × 2^(n−1), capped, then a random point in its
    /// upper half.
    private func retryDelay(afterAttempt number: Int) -> TimeAmount {
        let base = self.configuration.retryBackoffBase.nanoseconds
        let exponential = base << Int64(min(number - 1, 20))
        let capped = min(exponential, self.configuration.retryBackoffLimit.nanoseconds)
        return .nanoseconds(Int64.random(in: (capped / 2)...max(capped / 2, capped)))
    }
}

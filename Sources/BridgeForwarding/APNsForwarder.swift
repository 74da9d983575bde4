import BridgeCore
import CoreMetrics
import Foundation
import LegacyProtocol
import Logging
import NIOCore
import NIOPosix
import UpstreamAPNs

// Over 400 lines, on purpose: one set of credentials' way to APNs for a legacy notification,
// out (the request from the frame, a broadcast to its channel) and back (the client's final
// result as a legacy outcome, with the log line and the counter each failure deserves, and
// the push log's entry), kept together because both directions read the same tenant, request
// and answer.

extension ForwardedNotification.ID {
    /// The id as the client sends it: kept as its 128 bits, written as text only on the wire.
    fileprivate var apnsRequestID: APNsRequestID {
        APNsRequestID(high: self.high, low: self.low)
    }
}

/// Fills the gateway's ``NotificationForwarder`` seam with one ``APNsClient`` per APNs
/// environment, for one set of credentials.
///
/// For each legacy notification it builds the HTTP/2 request (docs/upstream.md#requests: the tenant's topic,
/// the push type inferred, background notifications at priority 5, the notification's id as
/// `apns-id` and `apns-collapse-id`), sends it with the client of the tenant's environment, and reads the client's final result as a
/// legacy outcome (``LegacyOutcomeMapping``, docs/upstream.md#outcomes), with the log line and the alarm
/// each kind of failure deserves.
public final class APNsForwarder: NotificationForwarder {
    public struct Configuration: Sendable {
        /// Where each environment is reached (Apple's hosts by default).
        public var endpoints: [APNsEnvironment: APNsEndpoint] = [
            .production: .production, .sandbox: .sandbox,
        ]
        /// Where each environment's broadcast push API is reached (frames to channel tokens).
        public var broadcastEndpoints: [APNsEnvironment: APNsEndpoint] = [
            .production: .broadcastProduction, .sandbox: .broadcastSandbox,
        ]
        /// The settings of every environment's client.
        public var client = APNsClient.Configuration()

        public init() {}
    }

    private let clients: [APNsEnvironment: APNsClient]
    /// The same clients, for the lookup once per notification: a switch, where the dictionary
    /// hashes the environment's raw value (a string).
    private let productionClient: APNsClient?
    private let sandboxClient: APNsClient?
    /// Broadcasts go to their own hosts; a client opens no connection before its first request.
    private let broadcastClients: [APNsEnvironment: APNsClient]
    private let logger: Logger
    /// Where each notification's answer is kept for `apns-bridge log`; `nil` when it is off.
    let pushLog: PushLog?
    /// Bridge bugs and upstream faults come once per notification when they come at all (a
    /// server that resets every stream): one line per kind per interval, with the count left out.
    private let bridgeBugLog = LogRateLimit()
    private let upstreamFaultLog = LogRateLimit()
    private let forwarded: Counter
    private let failed: LabelledCounters
    private let broadcastsForwarded: Counter
    private let broadcastsFailed: LabelledCounters

    public init(
        configuration: Configuration,
        credentials: APNsCredentials,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns-bridge.upstream"),
        metricsFactory: any MetricsFactory = MetricsSystem.factory,
        pushLog: PushLog? = nil
    ) throws {
        func makeClients(
            _ endpoints: [APNsEnvironment: APNsEndpoint],
            api: String
        ) throws -> [APNsEnvironment: APNsClient] {
            var clients: [APNsEnvironment: APNsClient] = [:]
            for (environment, endpoint) in endpoints {
                var clientLogger = logger
                clientLogger[metadataKey: "environment"] = "\(environment.rawValue)"
                if api != "device" { clientLogger[metadataKey: "api"] = "\(api)" }
                clients[environment] = try APNsClient(
                    endpoint: endpoint,
                    configuration: configuration.client,
                    credentials: credentials,
                    group: group,
                    logger: clientLogger,
                    metricsFactory: metricsFactory
                )
            }
            return clients
        }
        self.clients = try makeClients(configuration.endpoints, api: "device")
        self.productionClient = self.clients[.production]
        self.sandboxClient = self.clients[.sandbox]
        self.broadcastClients = try makeClients(configuration.broadcastEndpoints, api: "broadcast")
        self.logger = logger
        self.pushLog = pushLog
        self.forwarded = Counter(label: "apns_bridge_notifications_forwarded_total", factory: metricsFactory)
        self.failed = LabelledCounters(
            label: "apns_bridge_notifications_failed_total",
            labelNames: ["status", "reason"],
            factory: metricsFactory
        )
        self.broadcastsForwarded = Counter(label: "apns_bridge_broadcasts_forwarded_total", factory: metricsFactory)
        self.broadcastsFailed = LabelledCounters(
            label: "apns_bridge_broadcasts_failed_total",
            labelNames: ["status", "reason"],
            factory: metricsFactory
        )
    }

    /// The client of an environment (`nil` when the configuration has no endpoint for it).
    public func client(_ environment: APNsEnvironment) -> APNsClient? {
        self.clients[environment]
    }

    /// Connections opened so far in an environment.
    public func connectionsOpened(_ environment: APNsEnvironment) -> Int {
        self.clients[environment]?.connectionsOpened ?? 0
    }

    /// Connections of an environment taking requests now (metrics).
    public func usableConnectionCount(_ environment: APNsEnvironment) -> Int {
        self.clients[environment]?.usableConnectionCount ?? 0
    }

    /// An environment's connections by state: usable, draining, connecting (metrics).
    public func connectionCounts(_ environment: APNsEnvironment) -> APNsClient.ConnectionCounts {
        self.clients[environment]?.connectionCounts ?? APNsClient.ConnectionCounts()
    }

    /// Whether an environment has a connection taking requests now (readiness).
    public func hasUsableConnection(_ environment: APNsEnvironment) -> Bool {
        self.clients[environment]?.hasUsableConnection ?? false
    }

    /// Opens an environment's connections now rather than at its first notification.
    public func warmUp(_ environment: APNsEnvironment) {
        self.clients[environment]?.warmUp()
    }

    /// Each environment's connections and queue, for diagnostics.
    public var poolSnapshot: String {
        self.clients.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key.rawValue): \($0.value.poolSnapshot)" }
            .joined(separator: "; ")
    }

    /// Closes every connection; requests still waiting fail.
    public func shutdown() {
        for client in self.clients.values {
            client.shutdown()
        }
        for client in self.broadcastClients.values {
            client.shutdown()
        }
    }

    /// ``shutdown()``, then waits until every connection that was open is closed.
    public func shutdownAndWait() async {
        for client in Array(self.clients.values) + Array(self.broadcastClients.values) {
            await client.shutdownAndWait()
        }
    }

    /// The HTTP/2 request of a legacy notification (docs/upstream.md#requests), under the
    /// notification's id (its `apns-id` and collapse id).
    public static func request(for notification: ForwardedNotification) -> APNsRequest {
        let frame = notification.frame
        let pushType = APNsPushType.infer(topic: notification.tenant.topic, payload: frame.payload)
        return APNsRequest(
            deviceToken: frame.deviceToken,
            topic: notification.tenant.topic,
            pushType: pushType,
            priority: pushType == .background ? 5 : frame.priority,
            expiration: frame.expiration,
            id: notification.id.apnsRequestID,
            payload: frame.payload
        )
    }

    /// The broadcast request of a legacy notification to a channel token: the frame's priority
    /// (1 is valid here) and expiry (0 for a channel that stores no messages), the
    /// notification's id as its `apns-request-id`, the payload as it is.
    public static func broadcastRequest(
        for notification: ForwardedNotification,
        channel: BroadcastChannel,
        bundleID: String
    ) -> APNsRequest {
        let frame = notification.frame
        return APNsRequest.broadcast(
            bundleID: bundleID,
            channelID: channel.id,
            priority: frame.priority,
            expiration: channel.storesMessages == false ? 0 : frame.expiration,
            requestID: notification.id.apnsRequestID.description,
            payload: frame.payload
        )
    }

    // MARK: NotificationForwarder

    public func send(
        _ notification: ForwardedNotification,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (NotificationOutcome) -> Void
    ) {
        if case .broadcast(let channel) = notification.destination {
            self.broadcast(notification, to: channel, on: eventLoop, completion: completion)
            return
        }
        let identifier = notification.frame.identifier
        let client =
            switch notification.tenant.environment {
            case .production: self.productionClient
            case .sandbox: self.sandboxClient
            }
        guard let client else {
            self.logger.error(
                "no upstream endpoint for the environment",
                metadata: ["environment": "\(notification.tenant.environment.rawValue)"]
            )
            self.count(.gaveUp(.processingError), reason: nil)
            self.pushLog?.record(notification, outcome: .gaveUp(.processingError), failure: "no upstream endpoint")
            completion(.gaveUp(.processingError))
            return
        }
        let request = Self.request(for: notification)
        self.logger.debug(
            "forwarding",
            metadata: [
                "identifier": "\(identifier)", "apns-id": "\(request.apnsID)", "push_type": "\(request.pushType)",
            ]
        )
        client.send(request, on: eventLoop) { result, summary in
            let outcome = self.outcome(of: result, identifier: identifier, request: request)
            self.record(notification, result: result, summary: summary, outcome: outcome)
            completion(outcome)
        }
    }

    /// A frame to a channel token, as a broadcast (Apple's broadcast push API).
    private func broadcast(
        _ notification: ForwardedNotification,
        to channel: BroadcastChannel,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (NotificationOutcome) -> Void
    ) {
        let identifier = notification.frame.identifier
        let tenant = notification.tenant
        guard let client = self.broadcastClients[tenant.environment], let bundleID = tenant.broadcastBundleID else {
            self.logger.error(
                "no broadcast endpoint or bundle id for the tenant",
                metadata: [
                    "tenant": "\(tenant.name)", "environment": "\(tenant.environment.rawValue)",
                    "channel": "\(channel.name)",
                ]
            )
            self.countBroadcast(.gaveUp(.processingError), reason: nil)
            self.pushLog?.record(
                notification,
                outcome: .gaveUp(.processingError),
                failure: "no broadcast endpoint or bundle id"
            )
            completion(.gaveUp(.processingError))
            return
        }
        let request = Self.broadcastRequest(
            for: notification,
            channel: channel,
            bundleID: bundleID
        )
        client.send(request, on: eventLoop) { result, summary in
            let outcome = self.broadcastOutcome(
                of: result,
                identifier: identifier,
                request: request,
                channel: channel,
                tenant: tenant
            )
            self.record(notification, result: result, summary: summary, outcome: outcome)
            completion(outcome)
        }
    }

    private func broadcastOutcome(
        of result: APNsSendResult,
        identifier: NotificationIdentifier,
        request: APNsRequest,
        channel: BroadcastChannel,
        tenant: Tenant
    ) -> NotificationOutcome {
        let mapping = LegacyOutcomeMapping(result, now: UInt64(Date().timeIntervalSince1970 * 1000))
        var metadata: Logger.Metadata = [
            "identifier": "\(identifier)", "apns-request-id": "\(request.apnsID)", "tenant": "\(tenant.name)",
            "channel": "\(channel.name)", "channel-id": "\(channel.id)",
        ]
        let reason = Self.describe(result, into: &metadata)
        // Broadcasts are few (one per channel update, not one per device): each is logged.
        switch mapping {
        case .outcome(.accepted):
            self.logger.info("broadcast sent", metadata: metadata)
        case .outcome(.unregistered):
            self.logger.warning(
                "the channel no longer exists: its channel token goes on the feedback list",
                metadata: metadata
            )
        case .outcome:
            self.logger.warning("broadcast refused", metadata: metadata)
        case .gaveUp, .throttled:
            metadata["outcome"] = "\(mapping.outcome)"
            self.logger.warning("gave up a broadcast after retries", metadata: metadata)
        case .credentialFailure:
            self.logger.error(
                "upstream refused the bridge's credentials for a broadcast: check the tenant's key or certificate",
                metadata: metadata
            )
        case .topicFailure:
            self.logger.error(
                "upstream refused the tenant's app for broadcasts: check its topic and that broadcast push is enabled for it",
                metadata: metadata
            )
        case .bridgeBug where reason == .badExpirationDate && request.expiration != 0:
            self.logger.error(
                "the channel stores no messages, so APNs takes only expiration 0: set its messageStoragePolicy to 0 in the configuration",
                metadata: metadata
            )
        case .bridgeBug:
            self.logLimited(
                .critical,
                "upstream refused a broadcast the bridge built: this is a bug in apns-bridge",
                metadata,
                by: self.bridgeBugLog
            )
        case .upstreamFault:
            self.logLimited(
                .warning,
                "upstream answered a broadcast outside Apple's documented API",
                metadata,
                by: self.upstreamFaultLog
            )
        }
        self.countBroadcast(mapping.outcome, reason: reason)
        return mapping.outcome
    }

    private func outcome(
        of result: APNsSendResult,
        identifier: NotificationIdentifier,
        request: APNsRequest
    ) -> NotificationOutcome {
        if result.isAccepted {
            // The common case: nothing to log, no metadata to build.
            self.forwarded.increment()
            return .accepted
        }
        let mapping = LegacyOutcomeMapping(result)
        var metadata: Logger.Metadata = ["identifier": "\(identifier)", "apns-id": "\(request.apnsID)"]
        let reason = Self.describe(result, into: &metadata)
        switch mapping {
        case .outcome:
            self.logger.debug("upstream answered", metadata: metadata)
        case .gaveUp, .throttled:
            metadata["outcome"] = "\(mapping.outcome)"
            self.logger.warning("gave up after retries", metadata: metadata)
        case .credentialFailure:
            self.logger.error(
                "upstream refused the bridge's credentials: check the tenant's key or certificate",
                metadata: metadata
            )
        case .topicFailure:
            self.logger.error(
                "upstream refused the tenant's topic: check the tenant's configuration",
                metadata: metadata
            )
        case .bridgeBug:
            self.logLimited(
                .critical,
                "upstream refused a request the bridge built: this is a bug in apns-bridge",
                metadata,
                by: self.bridgeBugLog
            )
        case .upstreamFault:
            self.logLimited(
                .warning,
                "upstream answered outside Apple's documented API",
                metadata,
                by: self.upstreamFaultLog
            )
        }
        self.count(mapping.outcome, reason: reason)
        return mapping.outcome
    }

    /// One line now unless `limit` had one within its interval; the line says how many it left out.
    private func logLimited(
        _ level: Logger.Level,
        _ message: Logger.Message,
        _ metadata: Logger.Metadata,
        by limit: LogRateLimit
    ) {
        guard let suppressed = limit.admit() else { return }
        var metadata = metadata
        if suppressed > 0 { metadata["left_out_since_last_line"] = "\(suppressed)" }
        self.logger.log(level: level, message, metadata: metadata)
    }

    /// Adds what APNs answered (status, `apns-unique-id`, reason) or why it did not to a log
    /// line's metadata; returns the reason, for the failure metric.
    private static func describe(_ result: APNsSendResult, into metadata: inout Logger.Metadata) -> APNsReason? {
        let reason: APNsReason?
        switch result {
        case .answered(let response):
            metadata["status"] = "\(response.status)"
            reason = response.reason
            if let uniqueID = response.uniqueID { metadata["apns-unique-id"] = "\(uniqueID)" }
        case .unanswered(let failure, let lastResponse):
            metadata["failure"] = "\(failure)"
            reason = lastResponse?.reason
        }
        if let reason { metadata["reason"] = "\(reason)" }
        return reason
    }

    /// `forwarded_total` when APNs accepted it, else
    /// `apns_bridge_notifications_failed_total{status, reason}` with the legacy status (`none`
    /// when the provider is told nothing) and APNs' reason (`none` without one).
    private func count(_ outcome: NotificationOutcome, reason: APNsReason?) {
        guard let labels = Self.failureLabels(outcome, reason: reason) else {
            self.forwarded.increment()
            return
        }
        self.failed.increment(labels)
    }

    /// The same for broadcasts: `apns_bridge_broadcasts_forwarded_total` and
    /// `apns_bridge_broadcasts_failed_total{status, reason}`.
    private func countBroadcast(_ outcome: NotificationOutcome, reason: APNsReason?) {
        guard let labels = Self.failureLabels(outcome, reason: reason) else {
            self.broadcastsForwarded.increment()
            return
        }
        self.broadcastsFailed.increment(labels)
    }

    /// `[status, reason]` of an outcome that is not an acceptance.
    private static func failureLabels(_ outcome: NotificationOutcome, reason: APNsReason?) -> [String]? {
        let status: String
        switch outcome {
        case .accepted: return nil
        // A 410 tells the provider nothing: the token goes to the feedback list.
        case .unregistered: status = "none"
        case .rejected(let legacy), .gaveUp(let legacy): status = "\(legacy.rawValue)"
        case .dropped: status = "none"
        }
        return [status, reason.map { APNsReason.documented.contains($0) ? $0.rawValue : "other" } ?? "none"]
    }
}

/// The forwarder's entry in the push log (docs/operations.md#did-it-go): it is where a legacy
/// notification meets the `apns-id` it was sent with and APNs' answer.
extension APNsForwarder {
    /// Keeps what APNs answered `notification`, and what the provider is told.
    func record(
        _ notification: ForwardedNotification,
        result: APNsSendResult,
        summary: APNsSendSummary,
        outcome: NotificationOutcome
    ) {
        guard let pushLog = self.pushLog else { return }
        let status: UInt16
        let reason: APNsReason?
        var uniqueID: String?
        var failure: String?
        switch result {
        case .answered(let response):
            status = UInt16(clamping: response.status)
            reason = response.reason
            uniqueID = response.uniqueID
        case .unanswered(let sendFailure, let lastResponse):
            status = 0
            reason = lastResponse?.reason
            failure = "\(sendFailure.kind)"
        }
        // The common case, a 200 from production, has no string to keep: no allocation.
        pushLog.record(
            PushLogEntry(
                notification,
                forwardedAt: summary.sentAt,
                keepingTokenBytes: pushLog.keepsFullTokens,
                status: status,
                attempts: UInt16(clamping: summary.attempts),
                microseconds: UInt32(clamping: summary.elapsed.nanoseconds / 1000),
                outcome: outcome,
                uniqueID: uniqueID,
                reason: reason?.rawValue,
                failure: failure
            )
        )
    }
}

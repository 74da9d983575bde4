import BridgeCore
import CoreMetrics
import LegacyProtocol
import NIOCore

/// The upstream side's metrics, through swift-metrics (see `GatewayMetrics` for the legacy side).
final class UpstreamMetrics: Sendable {
    static let shared = UpstreamMetrics()

    /// One per HTTP/2 request attempt that got an answer, from the write to the answer.
    let requestDuration = Timer(label: "apns_bridge_upstream_request_duration_seconds", preferredDisplayUnit: .seconds)
    let forwarded = Counter(label: "apns_bridge_notifications_forwarded_total")
    let retries = Counter(label: "apns_bridge_upstream_retries_total")
    let goAways = Counter(label: "apns_bridge_upstream_goaways_total")
    /// Streams reset because the upstream did not answer before the request's deadline.
    let timeouts = Counter(label: "apns_bridge_upstream_request_timeouts_total")
    let tokensMinted = Counter(label: "apns_bridge_provider_tokens_minted_total")
    /// Made once: nearly every answer is a 200, and it should not cost a lookup.
    private let okResponses = Counter(label: "apns_bridge_upstream_responses_total", dimensions: [("status", "200")])
    private let otherResponses = LabelledCounters(label: "apns_bridge_upstream_responses_total", labelNames: ["status"])

    /// Reasons outside Apple's documented list are counted as `other`, so that an upstream
    /// cannot grow the label sets without bound.
    private static let knownReasons: Set<String> = [
        "BadCollapseId", "BadDeviceToken", "BadExpirationDate", "BadMessageId", "BadPriority", "BadTopic",
        "DeviceTokenNotForTopic", "DuplicateHeaders", "IdleTimeout", "InvalidPushType", "MissingDeviceToken",
        "MissingTopic", "PayloadEmpty", "TopicDisallowed", "MissingPushType", "BadCertificate",
        "BadCertificateEnvironment", "ExpiredProviderToken", "Forbidden", "InvalidProviderToken",
        "MissingProviderToken", "UnrelatedKeyIdInToken", "BadEnvironmentKeyIdInToken", "BadPath",
        "MethodNotAllowed", "ExpiredToken", "Unregistered", "PayloadTooLarge", "TooManyProviderTokenUpdates",
        "TooManyRequests", "InternalServerError", "ServiceUnavailable", "Shutdown",
    ]

    private init() {}

    func attemptAnswered(status: Int, after nanoseconds: Int64) {
        self.requestDuration.recordNanoseconds(nanoseconds)
        self.responded(status: status)
    }

    func retried() { self.retries.increment() }
    func goAwayReceived() { self.goAways.increment() }
    func streamsTimedOut(_ count: Int) { self.timeouts.increment(by: Int64(count)) }
    func tokenMinted() { self.tokensMinted.increment() }

    /// `apns_bridge_upstream_responses_total{status}`: HTTP statuses of every answered attempt.
    func responded(status: Int) {
        if status == 200 {
            self.okResponses.increment()
        } else {
            self.otherResponses.increment(["\(status)"])
        }
    }

    /// The final outcome of one notification sent upstream: `forwarded_total` when APNs
    /// accepted it, else `apns_bridge_notifications_failed_total{status, reason}` with the legacy
    /// status (`none` when the provider is told nothing) and APNs' reason (`none` without one).
    func finished(_ outcome: NotificationOutcome, reason: APNsReason?) {
        let status: String
        switch outcome {
        case .accepted:
            self.forwarded.increment()
            return
        case .unregistered: status = "\(ErrorResponseStatus.invalidToken.rawValue)"
        case .rejected(let legacy): status = "\(legacy.rawValue)"
        case .dropped: status = "none"
        }
        let reasonLabel = reason.map { Self.knownReasons.contains($0.rawValue) ? $0.rawValue : "other" } ?? "none"
        NotificationMetrics.failed.increment([status, reasonLabel])
    }
}

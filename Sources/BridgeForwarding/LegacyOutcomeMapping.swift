import BridgeCore
import LegacyProtocol
import UpstreamAPNs

/// What the APNs client's final result means to a legacy provider (docs/upstream.md#outcomes).
///
/// The client has already retried what may be retried (429 and 5xx within the budget, an
/// expired authentication token once, unprocessed streams); this is the bridge's reading of what is
/// left: an outcome for the provider session, and for some answers an alarm for the operator.
public enum LegacyOutcomeMapping: Hashable, Sendable {
    /// The provider sees this outcome; nothing for the operator.
    case outcome(NotificationOutcome)
    /// APNs still answered 5xx, or nothing at all, when the retry budget ran out, or the bridge
    /// is stopping: status 1. The bridge's decision, not APNs' answer: a resend record does not
    /// keep it (docs/protocol.md#resend-records).
    case gaveUp
    /// APNs still answered 429 when the retry budget ran out: dropped, the provider is told
    /// nothing. The bridge's decision too, like ``gaveUp``.
    case throttled
    /// A credential problem (403 reasons, a authentication token refused again after a refresh, a
    /// token that cannot be signed): an alarm; the provider gets status 1.
    case credentialFailure
    /// The topic comes from the tenant's configuration, so this is an operator's problem (as is
    /// an app without broadcast push enabled): an alarm; the provider gets status 3.
    case topicFailure
    /// The bridge built a request APNs calls malformed (one of Apple's documented reasons about
    /// a header the bridge writes, such as `BadPriority`): a bug, logged as critical (at most one
    /// line per interval); status 255.
    case bridgeBug
    /// The upstream answered outside Apple's documented API (a status or reason Apple does not
    /// list, a body without a reason), or reset the stream with `PROTOCOL_ERROR`: its
    /// behaviour, never a bug in the bridge. A warning (at most one line per interval); status
    /// 255, the legacy interface's "unknown", on both HTTP/2 engines.
    case upstreamFault

    /// The outcome the provider session gets.
    public var outcome: NotificationOutcome {
        switch self {
        case .outcome(let outcome): outcome
        case .gaveUp: .gaveUp(.processingError)
        case .throttled: .dropped
        case .credentialFailure: .rejected(.processingError)
        case .topicFailure: .rejected(.missingTopic)
        case .bridgeBug, .upstreamFault: .rejected(.unknown)
        }
    }

    /// - Parameter now: milliseconds since 1970, the feedback time of a channel APNs says no
    ///   longer exists (its answer carries no timestamp).
    public init(_ result: APNsSendResult, now: UInt64 = 0) {
        switch result {
        case .answered(let response):
            self.init(
                status: response.status,
                reason: response.reason,
                timestamp: response.timestamp ?? (response.reason == .channelNotRegistered ? now : nil)
            )
        case .unanswered(let failure, let lastResponse):
            switch failure.kind {
            case .cannotSignAuthenticationToken:
                self = .credentialFailure
            case .clientShutDown:
                // The bridge is stopping: as if the budget ran out, the bridge gave up on it.
                self = .gaveUp
            case .retryBudgetExhausted:
                // After a 429, a later attempt that went unanswered still counts as throttled.
                self = lastResponse?.status == 429 ? .throttled : .gaveUp
            case .malformedHeader(let name):
                // Never sent (docs/upstream.md#outcomes as APNs would answer it): a topic is the tenant's,
                // so the operator's problem (3); a channel id stands for the token (8); anything
                // else the bridge built itself (255).
                switch name {
                case "apns-topic": self = .topicFailure
                case "apns-channel-id": self = .outcome(.rejected(.invalidToken))
                default: self = .bridgeBug
                }
            case .refusedByServer:
                // A stream reset with PROTOCOL_ERROR: the server calls the request malformed, yet
                // it says nothing of what: the upstream's word, not proof of a bridge bug (a
                // hostile or broken server resets every stream so).
                self = .upstreamFault
            }
        }
    }

    /// Maps an answer the client did not retry (or no longer retries).
    ///
    /// - Parameter timestamp: the `timestamp` of a 410 answer, in milliseconds since 1970.
    public init(status: Int, reason: APNsReason?, timestamp: UInt64? = nil) {
        if status == 200 {
            self = .outcome(.accepted)
            return
        }
        switch reason {
        case .unregistered?, .expiredToken?, .channelNotRegistered?:
            // A channel that no longer exists goes on the feedback list like a device that is
            // gone, under its channel token.
            self = .outcome(.unregistered(timestamp: UInt32(clamping: (timestamp ?? 0) / 1000)))
        case .badDeviceToken?, .deviceTokenNotForTopic?, .missingChannelId?, .badChannelId?:
            self = .outcome(.rejected(.invalidToken))
        case .missingDeviceToken?:
            self = .outcome(.rejected(.missingDeviceToken))
        case .missingTopic?, .badTopic?, .topicDisallowed?, .featureNotEnabled?, .topicMismatch?:
            self = .topicFailure
        case .badRequestParams?, .badRequestPayload?:
            // A broadcast's payload is the provider's, passed on as it is: not a bridge bug, but
            // the legacy interface has no status for malformed JSON.
            self = .outcome(.rejected(.unknown))
        case .payloadEmpty?:
            self = .outcome(.rejected(.missingPayload))
        case .payloadTooLarge?:
            self = .outcome(.rejected(.invalidPayloadSize))
        case .tooManyRequests?:
            self = .throttled
        case .internalServerError?, .serviceUnavailable?, .shutdown?, .idleTimeout?:
            self = .gaveUp
        case .badCertificate?, .badCertificateEnvironment?, .forbidden?, .invalidProviderToken?,
            .missingProviderToken?, .unrelatedKeyIdInToken?, .badEnvironmentKeyIdInToken?,
            .expiredProviderToken?, .tooManyProviderTokenUpdates?:
            self = .credentialFailure
        case .badPriority?, .badExpirationDate?, .badMessageId?, .badCollapseId?, .duplicateHeaders?,
            .invalidPushType?, .missingPushType?, .badPath?, .methodNotAllowed?:
            self = .bridgeBug
        default:
            switch status {
            case 410: self = .outcome(.unregistered(timestamp: UInt32(clamping: (timestamp ?? 0) / 1000)))
            case 429: self = .throttled
            case 500...599: self = .gaveUp
            case 403: self = .credentialFailure
            default: self = .upstreamFault
            }
        }
    }
}

import LegacyProtocol

/// How the bridge treats one HTTP/2 answer from APNs (CONTRACT §1.7).
///
/// The upstream client uses this to decide between finishing a notification and retrying it;
/// the provider session only ever sees the final ``NotificationOutcome``.
public enum UpstreamResponseClassification: Hashable, Sendable {
    /// Final: report this outcome.
    case final(NotificationOutcome)
    /// Refresh the provider token (JWT) once, then retry; never surfaced to the provider.
    case refreshCredentialsAndRetry
    /// Retry (on another connection where possible) within the retry budget. When the budget
    /// runs out, the outcome is `exhausted`.
    case retry(exhausted: NotificationOutcome)
    /// A credential problem: the tenant is marked unhealthy and an alarm raised; the provider
    /// gets status 1.
    case credentialFailure
    /// The topic comes from the tenant's configuration, so this is an operator's problem: raise
    /// an alarm; the provider gets status 3.
    case topicFailure
    /// The bridge built a bad request: a bug, logged loudly; the provider gets status 255.
    case bridgeBug

    /// The outcome the provider sees when no retry is made.
    public var outcomeWithoutRetry: NotificationOutcome {
        switch self {
        case .final(let outcome): outcome
        case .refreshCredentialsAndRetry, .credentialFailure: .rejected(.processingError)
        case .retry(let exhausted): exhausted
        case .topicFailure: .rejected(.missingTopic)
        case .bridgeBug: .rejected(.unknown)
        }
    }

    /// Classifies an HTTP status and reason.
    ///
    /// - Parameter timestamp: the `timestamp` of a 410 answer, in milliseconds since 1970.
    public init(status: Int, reason: APNsReason?, timestamp: UInt64? = nil) {
        if status == 200 {
            self = .final(.accepted)
            return
        }
        switch reason {
        case .unregistered?, .expiredToken?:
            let seconds = UInt32(clamping: (timestamp ?? 0) / 1000)
            self = .final(.unregistered(timestamp: seconds))
        case .badDeviceToken?, .deviceTokenNotForTopic?:
            self = .final(.rejected(.invalidToken))
        case .missingDeviceToken?:
            self = .final(.rejected(.missingDeviceToken))
        case .missingTopic?, .badTopic?, .topicDisallowed?:
            self = .topicFailure
        case .payloadEmpty?:
            self = .final(.rejected(.missingPayload))
        case .payloadTooLarge?:
            self = .final(.rejected(.invalidPayloadSize))
        case .expiredProviderToken?, .tooManyProviderTokenUpdates?, .idleTimeout?:
            self = .refreshCredentialsAndRetry
        case .tooManyRequests?:
            self = .retry(exhausted: .dropped)
        case .internalServerError?, .serviceUnavailable?, .shutdown?:
            self = .retry(exhausted: .rejected(.processingError))
        case .badCertificate?, .badCertificateEnvironment?, .forbidden?, .invalidProviderToken?,
            .missingProviderToken?, .unrelatedKeyIdInToken?, .badEnvironmentKeyIdInToken?:
            self = .credentialFailure
        case .badPriority?, .badExpirationDate?, .badMessageId?, .badCollapseId?, .duplicateHeaders?,
            .invalidPushType?, .missingPushType?, .badPath?, .methodNotAllowed?:
            self = .bridgeBug
        default:
            switch status {
            case 410: self = .final(.unregistered(timestamp: UInt32(clamping: (timestamp ?? 0) / 1000)))
            case 429: self = .retry(exhausted: .dropped)
            case 500...599: self = .retry(exhausted: .rejected(.processingError))
            case 403: self = .credentialFailure
            default: self = .bridgeBug
            }
        }
    }
}

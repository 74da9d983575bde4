/// The `reason` string of an APNs HTTP/2 error response (or of a GOAWAY's JSON debug data).
///
/// A value type with static members for the documented reasons and room for any other string,
/// so that a reason Apple adds later decodes instead of failing.
public struct APNsReason: Hashable, Sendable, CustomStringConvertible {
    public var rawValue: String

    public init(_ rawValue: String) {
        self.rawValue = rawValue
    }

    public var description: String { self.rawValue }

    // 400
    public static let badCollapseId = APNsReason("BadCollapseId")
    public static let badDeviceToken = APNsReason("BadDeviceToken")
    public static let badExpirationDate = APNsReason("BadExpirationDate")
    public static let badMessageId = APNsReason("BadMessageId")
    public static let badPriority = APNsReason("BadPriority")
    public static let badTopic = APNsReason("BadTopic")
    public static let deviceTokenNotForTopic = APNsReason("DeviceTokenNotForTopic")
    public static let duplicateHeaders = APNsReason("DuplicateHeaders")
    public static let idleTimeout = APNsReason("IdleTimeout")
    public static let invalidPushType = APNsReason("InvalidPushType")
    public static let missingDeviceToken = APNsReason("MissingDeviceToken")
    public static let missingTopic = APNsReason("MissingTopic")
    public static let payloadEmpty = APNsReason("PayloadEmpty")
    public static let topicDisallowed = APNsReason("TopicDisallowed")
    public static let missingPushType = APNsReason("MissingPushType")
    // 403
    public static let badCertificate = APNsReason("BadCertificate")
    public static let badCertificateEnvironment = APNsReason("BadCertificateEnvironment")
    public static let expiredProviderToken = APNsReason("ExpiredProviderToken")
    public static let forbidden = APNsReason("Forbidden")
    public static let invalidProviderToken = APNsReason("InvalidProviderToken")
    public static let missingProviderToken = APNsReason("MissingProviderToken")
    public static let unrelatedKeyIdInToken = APNsReason("UnrelatedKeyIdInToken")
    public static let badEnvironmentKeyIdInToken = APNsReason("BadEnvironmentKeyIdInToken")
    // 404, 405
    public static let badPath = APNsReason("BadPath")
    public static let methodNotAllowed = APNsReason("MethodNotAllowed")
    // 410
    public static let expiredToken = APNsReason("ExpiredToken")
    public static let unregistered = APNsReason("Unregistered")
    // 413
    public static let payloadTooLarge = APNsReason("PayloadTooLarge")
    // 429
    public static let tooManyProviderTokenUpdates = APNsReason("TooManyProviderTokenUpdates")
    public static let tooManyRequests = APNsReason("TooManyRequests")
    // Broadcast push and channel management (Apple's "Handling error responses from Apple Push
    // Notification service", broadcast edition); all 400 but TopicMismatch (403).
    public static let featureNotEnabled = APNsReason("FeatureNotEnabled")
    public static let missingChannelId = APNsReason("MissingChannelId")
    public static let badChannelId = APNsReason("BadChannelId")
    public static let channelNotRegistered = APNsReason("ChannelNotRegistered")
    public static let badRequestParams = APNsReason("BadRequestParams")
    public static let badRequestPayload = APNsReason("BadRequestPayload")
    public static let cannotCreateChannelConfig = APNsReason("CannotCreateChannelConfig")
    public static let topicMismatch = APNsReason("TopicMismatch")
    // 500, 503
    public static let internalServerError = APNsReason("InternalServerError")
    public static let serviceUnavailable = APNsReason("ServiceUnavailable")
    public static let shutdown = APNsReason("Shutdown")

    /// Every reason above: Apple's documented list (device, broadcast and channel management
    /// APIs). A metric labelled with reasons counts any other as `other`, so an upstream cannot
    /// grow its label set without bound.
    public static let documented: Set<APNsReason> = [
        .badCollapseId, .badDeviceToken, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
        .deviceTokenNotForTopic, .duplicateHeaders, .idleTimeout, .invalidPushType, .missingDeviceToken,
        .missingTopic, .payloadEmpty, .topicDisallowed, .missingPushType, .badCertificate,
        .badCertificateEnvironment, .expiredProviderToken, .forbidden, .invalidProviderToken,
        .missingProviderToken, .unrelatedKeyIdInToken, .badEnvironmentKeyIdInToken, .badPath, .methodNotAllowed,
        .expiredToken, .unregistered, .payloadTooLarge, .tooManyProviderTokenUpdates, .tooManyRequests,
        .featureNotEnabled, .missingChannelId, .badChannelId, .channelNotRegistered, .badRequestParams,
        .badRequestPayload, .cannotCreateChannelConfig, .topicMismatch, .internalServerError,
        .serviceUnavailable, .shutdown,
    ]
}

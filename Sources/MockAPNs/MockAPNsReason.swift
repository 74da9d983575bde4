/// A `reason` the mock answers with: the strings of Apple's "Handling notification responses
/// from APNs" table, written here on their own (the mock shares no code with the client it
/// tests, so a mistake in one is not repeated in the other). Any other string can be scripted.
public struct MockAPNsReason: Hashable, Sendable, CustomStringConvertible {
    public var rawValue: String

    public init(_ rawValue: String) {
        self.rawValue = rawValue
    }

    public var description: String { self.rawValue }

    // 400
    public static let badCollapseId = Self("BadCollapseId")
    public static let badDeviceToken = Self("BadDeviceToken")
    public static let badExpirationDate = Self("BadExpirationDate")
    public static let badMessageId = Self("BadMessageId")
    public static let badPriority = Self("BadPriority")
    public static let badTopic = Self("BadTopic")
    public static let deviceTokenNotForTopic = Self("DeviceTokenNotForTopic")
    public static let duplicateHeaders = Self("DuplicateHeaders")
    public static let idleTimeout = Self("IdleTimeout")
    public static let invalidPushType = Self("InvalidPushType")
    public static let missingDeviceToken = Self("MissingDeviceToken")
    public static let missingTopic = Self("MissingTopic")
    public static let payloadEmpty = Self("PayloadEmpty")
    public static let topicDisallowed = Self("TopicDisallowed")
    public static let missingPushType = Self("MissingPushType")
    // 403
    public static let badCertificate = Self("BadCertificate")
    public static let badCertificateEnvironment = Self("BadCertificateEnvironment")
    public static let expiredProviderToken = Self("ExpiredProviderToken")
    public static let forbidden = Self("Forbidden")
    public static let invalidProviderToken = Self("InvalidProviderToken")
    public static let missingProviderToken = Self("MissingProviderToken")
    public static let unrelatedKeyIdInToken = Self("UnrelatedKeyIdInToken")
    public static let badEnvironmentKeyIdInToken = Self("BadEnvironmentKeyIdInToken")
    // 404, 405
    public static let badPath = Self("BadPath")
    public static let methodNotAllowed = Self("MethodNotAllowed")
    // 410
    public static let expiredToken = Self("ExpiredToken")
    public static let unregistered = Self("Unregistered")
    // 413
    public static let payloadTooLarge = Self("PayloadTooLarge")
    // 429
    public static let tooManyProviderTokenUpdates = Self("TooManyProviderTokenUpdates")
    public static let tooManyRequests = Self("TooManyRequests")
    // Broadcast push and channel management (Apple's broadcast error table)
    public static let featureNotEnabled = Self("FeatureNotEnabled")
    public static let missingChannelId = Self("MissingChannelId")
    public static let badChannelId = Self("BadChannelId")
    public static let channelNotRegistered = Self("ChannelNotRegistered")
    public static let badRequestParams = Self("BadRequestParams")
    public static let badRequestPayload = Self("BadRequestPayload")
    public static let cannotCreateChannelConfig = Self("CannotCreateChannelConfig")
    public static let topicMismatch = Self("TopicMismatch")
    // 500, 503
    public static let internalServerError = Self("InternalServerError")
    public static let serviceUnavailable = Self("ServiceUnavailable")
    public static let shutdown = Self("Shutdown")
}

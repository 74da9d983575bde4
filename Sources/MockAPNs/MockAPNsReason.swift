/// A `reason` the mock answers with: the strings of Apple's "Handling notification responses
/// from APNs" table, written here on their own (the mock shares no code with the client it
/// tests, so a mistake in one is not repeated in the other). Any other string can be scripted.
package struct MockAPNsReason: Hashable, Sendable, CustomStringConvertible {
    package var rawValue: String

    package init(_ rawValue: String) {
        self.rawValue = rawValue
    }

    package var description: String { self.rawValue }

    // 400
    package static let badCollapseId = Self("BadCollapseId")
    package static let badDeviceToken = Self("BadDeviceToken")
    package static let badExpirationDate = Self("BadExpirationDate")
    package static let badMessageId = Self("BadMessageId")
    package static let badPriority = Self("BadPriority")
    package static let badTopic = Self("BadTopic")
    package static let deviceTokenNotForTopic = Self("DeviceTokenNotForTopic")
    package static let duplicateHeaders = Self("DuplicateHeaders")
    package static let idleTimeout = Self("IdleTimeout")
    package static let invalidPushType = Self("InvalidPushType")
    package static let missingDeviceToken = Self("MissingDeviceToken")
    package static let missingTopic = Self("MissingTopic")
    package static let payloadEmpty = Self("PayloadEmpty")
    package static let topicDisallowed = Self("TopicDisallowed")
    package static let missingPushType = Self("MissingPushType")
    // 403
    package static let badCertificate = Self("BadCertificate")
    package static let badCertificateEnvironment = Self("BadCertificateEnvironment")
    package static let expiredProviderToken = Self("ExpiredProviderToken")
    package static let forbidden = Self("Forbidden")
    package static let invalidProviderToken = Self("InvalidProviderToken")
    package static let missingProviderToken = Self("MissingProviderToken")
    package static let unrelatedKeyIdInToken = Self("UnrelatedKeyIdInToken")
    package static let badEnvironmentKeyIdInToken = Self("BadEnvironmentKeyIdInToken")
    // 404, 405
    package static let badPath = Self("BadPath")
    package static let methodNotAllowed = Self("MethodNotAllowed")
    // 410
    package static let expiredToken = Self("ExpiredToken")
    package static let unregistered = Self("Unregistered")
    // 413
    package static let payloadTooLarge = Self("PayloadTooLarge")
    // 429
    package static let tooManyProviderTokenUpdates = Self("TooManyProviderTokenUpdates")
    package static let tooManyRequests = Self("TooManyRequests")
    // Broadcast push and channel management (Apple's broadcast error table)
    package static let featureNotEnabled = Self("FeatureNotEnabled")
    package static let missingChannelId = Self("MissingChannelId")
    package static let badChannelId = Self("BadChannelId")
    package static let channelNotRegistered = Self("ChannelNotRegistered")
    package static let badRequestParams = Self("BadRequestParams")
    package static let badRequestPayload = Self("BadRequestPayload")
    package static let cannotCreateChannelConfig = Self("CannotCreateChannelConfig")
    package static let topicMismatch = Self("TopicMismatch")
    // 500, 503
    package static let internalServerError = Self("InternalServerError")
    package static let serviceUnavailable = Self("ServiceUnavailable")
    package static let shutdown = Self("Shutdown")
}

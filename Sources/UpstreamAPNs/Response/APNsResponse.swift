import Foundation
import NIOCore

/// An HTTP/2 answer from APNs: status, `apns-id` (or `apns-request-id`), `apns-unique-id`, for
/// errors the reason and (410) timestamp, and for channel management the channel id and body.
public struct APNsResponse: Hashable, Sendable {
    private struct Fields: Hashable {
        var status: Int
        var apnsID: String?
        var uniqueID: String?
        var reason: APNsReason?
        var timestamp: UInt64?
        var channelID: String?
        var body: ByteBuffer?
    }

    /// The fields, in one box every copy shares. An answer is handed up through the connection's
    /// completion, the pool's attempt result and the client's send result: a copy is then one
    /// retain of the box, where a copy of the fields was one per string and buffer
    /// (docs/performance-log.md, "Copies of a request and of its answer").
    private let box: ImmutableBox<Fields>

    public var status: Int { self.box.value.status }
    /// `apns-id` from the device API, `apns-request-id` from the broadcast and channel APIs.
    public var apnsID: String? { self.box.value.apnsID }
    /// `apns-unique-id`: sent by the development environment only, to look a notification up in
    /// Apple's delivery log.
    public var uniqueID: String? { self.box.value.uniqueID }
    public var reason: APNsReason? { self.box.value.reason }
    /// Milliseconds since 1970, sent with 410.
    public var timestamp: UInt64? { self.box.value.timestamp }
    /// `apns-channel-id`: the id of a channel the channel management API created.
    public var channelID: String? { self.box.value.channelID }
    /// The body of a successful answer that had one (up to the client's limit): a channel
    /// management answer. An error's body is read into ``reason`` and ``timestamp``.
    public var body: ByteBuffer? { self.box.value.body }

    public init(
        status: Int,
        apnsID: String?,
        uniqueID: String? = nil,
        reason: APNsReason? = nil,
        timestamp: UInt64? = nil,
        channelID: String? = nil,
        body: ByteBuffer? = nil
    ) {
        self.box = ImmutableBox(
            Fields(
                status: status,
                apnsID: apnsID,
                uniqueID: uniqueID,
                reason: reason,
                timestamp: timestamp,
                channelID: channelID,
                body: body
            )
        )
    }

    /// 200 (201 and 204 from the channel management API).
    public var isSuccess: Bool { (200..<300).contains(self.status) }

    /// APNs took the notification (200 from the device or broadcast API). The one place that
    /// says so: the client answers it without a retry decision, the bridge maps it to a
    /// delivered frame.
    public var isAccepted: Bool { self.status == 200 }

    public static func == (lhs: APNsResponse, rhs: APNsResponse) -> Bool {
        lhs.box === rhs.box || lhs.box.value == rhs.box.value
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.box.value)
    }
}

/// The JSON body APNs sends with an error status, and the debug data of its GOAWAY frames:
/// `{"reason": "BadDeviceToken"}`, with `"timestamp"` (milliseconds) for 410.
public struct APNsErrorBody: Hashable, Sendable, Decodable {
    public var reason: APNsReason?
    public var timestamp: UInt64?

    private enum CodingKeys: String, CodingKey {
        case reason
        case timestamp
    }

    public init(reason: APNsReason?, timestamp: UInt64? = nil) {
        self.reason = reason
        self.timestamp = timestamp
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.reason = try container.decodeIfPresent(String.self, forKey: .reason).map(APNsReason.init)
        // APNs sends a number; be lenient with a string.
        if let number = try? container.decodeIfPresent(UInt64.self, forKey: .timestamp) {
            self.timestamp = number
        } else if let text = try? container.decodeIfPresent(String.self, forKey: .timestamp) {
            self.timestamp = UInt64(text)
        } else {
            self.timestamp = nil
        }
    }

    /// Parses a body; an empty or malformed one gives `nil`.
    public static func parse(_ buffer: ByteBuffer) -> APNsErrorBody? {
        guard buffer.readableBytes > 0 else { return nil }
        return try? JSONDecoder().decode(APNsErrorBody.self, from: Data(buffer.readableBytesView))
    }
}

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

/// What became of one request sent with ``APNsClient/send(_:on:)``, after the client's retries.
public enum APNsSendResult: Hashable, Sendable, CustomStringConvertible {
    /// The answer that ends the request: a success, an error the client does not retry, or the
    /// last retryable answer (429, 5xx) when the retry budget ran out.
    case answered(APNsResponse)
    /// No final answer: the budget ran out while attempts went unanswered, or the request could
    /// not be sent at all. `lastResponse` is the last answer APNs did give (a retried 429 or 5xx).
    case unanswered(APNsSendFailure, lastResponse: APNsResponse?)

    /// Answered 200: APNs took the notification (``APNsResponse/isAccepted``).
    public var isAccepted: Bool {
        if case .answered(let response) = self { return response.isAccepted }
        return false
    }

    public var description: String {
        switch self {
        case .answered(let response):
            "answered \(response.status)\(response.reason.map { " \($0)" } ?? "")"
        case .unanswered(let failure, let lastResponse):
            "unanswered (\(failure))\(lastResponse.map { ", last answer \($0.status)" } ?? "")"
        }
    }
}

/// How a request reached its ``APNsSendResult``: the attempts the client made and the time
/// from the send to the result, given with the result by the completion-handler form of
/// ``APNsClient``'s `send` that takes two arguments. A push log keeps both beside the answer.
public struct APNsSendSummary: Hashable, Sendable {
    /// Attempts written to a connection or failed in a pool; 0 for a request never sent (a
    /// header HTTP/2 cannot carry, a client already shut down).
    public var attempts: Int
    /// When the request was sent, on the monotonic clock.
    public var sentAt: NIODeadline
    /// From the send to the result.
    public var elapsed: TimeAmount

    public init(attempts: Int, sentAt: NIODeadline, elapsed: TimeAmount) {
        self.attempts = attempts
        self.sentAt = sentAt
        self.elapsed = elapsed
    }
}

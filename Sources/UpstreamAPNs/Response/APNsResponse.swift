import NIOCore

/// An HTTP/2 answer from APNs: status, `apns-id` (or `apns-request-id`), `apns-unique-id`, for
/// errors the reason and (410) timestamp, and for channel management the channel id and body.
public struct APNsResponse: Hashable, Sendable {
    public var status: Int
    /// `apns-id` from the device API, `apns-request-id` from the broadcast and channel APIs.
    public var apnsID: String?
    /// `apns-unique-id`: sent by the development environment only, to look a notification up in
    /// Apple's delivery log.
    public var uniqueID: String?
    public var reason: APNsReason?
    /// Milliseconds since 1970, sent with 410.
    public var timestamp: UInt64?
    /// `apns-channel-id`: the id of a channel the channel management API created.
    public var channelID: String?
    /// The body of a successful answer that had one (up to the client's limit): a channel
    /// management answer. An error's body is read into ``reason`` and ``timestamp``.
    public var body: ByteBuffer?

    public init(
        status: Int,
        apnsID: String?,
        uniqueID: String? = nil,
        reason: APNsReason? = nil,
        timestamp: UInt64? = nil,
        channelID: String? = nil,
        body: ByteBuffer? = nil
    ) {
        self.status = status
        self.apnsID = apnsID
        self.uniqueID = uniqueID
        self.reason = reason
        self.timestamp = timestamp
        self.channelID = channelID
        self.body = body
    }

    /// 200 (201 and 204 from the channel management API).
    public var isSuccess: Bool { (200..<300).contains(self.status) }
}

/// Why one attempt of a request got no answer from APNs.
public struct APNsStreamFailure: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Hashable, Sendable {
        /// APNs certainly did not process it: above a GOAWAY's `lastStreamID`, refused with
        /// `REFUSED_STREAM`, or never written. Safe to send again at once.
        case unprocessed
        /// The stream was reset or the connection lost after the request was written: APNs may or
        /// may not have processed it.
        case interrupted
        /// The server reset this stream with `PROTOCOL_ERROR`: it refuses the request itself
        /// (a malformed header, say), so sending it again, on any connection, fails the same way.
        case refused
    }

    public var kind: Kind
    public var detail: String

    public static func unprocessed(_ detail: String) -> APNsStreamFailure {
        APNsStreamFailure(kind: .unprocessed, detail: detail)
    }

    public static func interrupted(_ detail: String) -> APNsStreamFailure {
        APNsStreamFailure(kind: .interrupted, detail: detail)
    }

    public static func refused(_ detail: String) -> APNsStreamFailure {
        APNsStreamFailure(kind: .refused, detail: detail)
    }

    public var description: String { "\(self.kind): \(self.detail)" }
}

/// What became of one request sent with ``APNsClient/send(_:on:)``, after the client's retries.
public enum APNsSendResult: Hashable, Sendable, CustomStringConvertible {
    /// The answer that ends the request: a success, an error the client does not retry, or the
    /// last retryable answer (429, 5xx) when the retry budget ran out.
    case answered(APNsResponse)
    /// No final answer: the budget ran out while attempts went unanswered, or the request could
    /// not be sent at all. `lastResponse` is the last answer APNs did give (a retried 429 or 5xx).
    case unanswered(APNsSendFailure, lastResponse: APNsResponse?)

    public var description: String {
        switch self {
        case .answered(let response):
            "answered \(response.status)\(response.reason.map { " \($0)" } ?? "")"
        case .unanswered(let failure, let lastResponse):
            "unanswered (\(failure))\(lastResponse.map { ", last answer \($0.status)" } ?? "")"
        }
    }
}

/// Why the client stopped without a final answer.
public struct APNsSendFailure: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Hashable, Sendable {
        /// The retry budget (or the notification's expiration) ran out while attempts went
        /// unanswered.
        case retryBudgetExhausted
        /// A provider token could not be signed: the request was never sent.
        case cannotSignProviderToken
        /// A header value of the request cannot be sent in HTTP/2 (a control character, or
        /// leading or trailing white space, RFC 9113 §8.2.1): the request was never sent, so it
        /// can neither fail other requests' streams nor close their connection.
        case malformedHeader(name: String)
        /// The server reset the request's stream with `PROTOCOL_ERROR`: not retried.
        case refusedByServer
        /// The client was shut down before the request had an answer: not retried.
        case clientShutDown
    }

    public var kind: Kind
    public var detail: String

    public init(kind: Kind, detail: String) {
        self.kind = kind
        self.detail = detail
    }

    public var description: String { "\(self.kind): \(self.detail)" }
}

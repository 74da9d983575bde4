import NIOCore

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

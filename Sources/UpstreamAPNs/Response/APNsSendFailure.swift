import NIOCore

/// Why the client stopped without a final answer.
public struct APNsSendFailure: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Hashable, Sendable {
        /// The retry budget (or the notification's expiration) ran out while attempts went
        /// unanswered.
        case retryBudgetExhausted
        /// A authentication token could not be signed: the request was never sent.
        case cannotSignAuthenticationToken
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

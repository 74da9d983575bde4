import LegacyProtocol
import NIOCore

/// The seam between a provider session and the modern APNs provider API.
///
/// The gateway sends each notification it forwards once and feeds the outcome back into the
/// session. An implementation does its own retries (within its retry budget) and maps the
/// HTTP/2 answer to a ``NotificationOutcome``.
public protocol NotificationForwarder: Sendable {
    /// Sends `notification` and calls `completion` once with its outcome, on any thread,
    /// possibly before this returns. There is no failure: what went wrong is an outcome.
    func send(
        _ notification: ForwardedNotification,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (NotificationOutcome) -> Void
    )
}

extension NotificationForwarder {
    /// ``send(_:on:completion:)`` as a future, which succeeds on `eventLoop`.
    public func send(
        _ notification: ForwardedNotification,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<NotificationOutcome> {
        let promise = eventLoop.makePromise(of: NotificationOutcome.self)
        self.send(notification, on: eventLoop) { promise.succeed($0) }
        return promise.futureResult
    }
}

/// What became of one notification upstream, in the legacy provider's terms (docs/upstream.md#outcomes).
///
/// The forwarder reports this after its own retries: a `rejected` outcome is final.
///
/// `accepted`, `unregistered` and `rejected` are answers APNs gave; `gaveUp` and `dropped` are
/// the bridge's own decisions. Only the former are kept as a resend record's outcome
/// (docs/protocol.md#resend-records): the resend of a notification the bridge gave up on is
/// forwarded again.
public enum NotificationOutcome: Hashable, Sendable, CustomStringConvertible {
    /// Delivered to APNs (HTTP 200): nothing is sent to the provider.
    case accepted
    /// APNs answered 410 (`Unregistered`, `ExpiredToken`): accepted silently, as Apple's gateway
    /// did, and the token goes to the tenant's feedback list with this timestamp (UNIX seconds).
    case unregistered(timestamp: UInt32)
    /// The provider gets an error-response with this status and the connection closes.
    case rejected(ErrorResponseStatus)
    /// The bridge gave up without an answer from APNs that settles the notification (the retry
    /// budget ran out on 5xx answers, resets or silence; no endpoint is configured; the resend
    /// store could not be read). The provider gets an error-response with this status, as for
    /// `rejected`, but whether APNs delivered it is unknown.
    case gaveUp(ErrorResponseStatus)
    /// Given up without telling the provider (429 after the retry budget): logged and counted.
    case dropped

    /// The status of the error-response the provider gets, if any.
    public var failureStatus: ErrorResponseStatus? {
        switch self {
        case .rejected(let status), .gaveUp(let status): status
        case .accepted, .unregistered, .dropped: nil
        }
    }

    /// Whether APNs gave this outcome (then a resend record keeps it), rather than the bridge
    /// deciding it (then the record's outcome stays unknown and a resend is forwarded again).
    public var isUpstreamAnswer: Bool {
        switch self {
        case .accepted, .unregistered, .rejected: true
        case .gaveUp, .dropped: false
        }
    }

    public var description: String {
        switch self {
        case .accepted: "accepted"
        case .unregistered(let timestamp): "unregistered(at: \(timestamp))"
        case .rejected(let status): "rejected(\(status))"
        case .gaveUp(let status): "gaveUp(\(status))"
        case .dropped: "dropped"
        }
    }
}

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

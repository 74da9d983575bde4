import LegacyProtocol
import NIOCore

/// The seam between a provider session and the modern APNs provider API.
///
/// The gateway sends each notification it forwards once and feeds the outcome back into the
/// session. An implementation does its own retries (within its retry budget) and maps the
/// HTTP/2 answer to a ``NotificationOutcome``; the future it returns always succeeds, on any
/// event loop.
public protocol NotificationUpstream: Sendable {
    func send(_ notification: UpstreamNotification, on eventLoop: any EventLoop) -> EventLoopFuture<NotificationOutcome>

    /// The same, without a future: `completion` is called once with the outcome, on any thread,
    /// possibly before this returns. The gateway's path: one notification's promise, future and
    /// callbacks are allocations an implementation that calls back anyway need not make.
    func send(
        _ notification: UpstreamNotification,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (NotificationOutcome) -> Void
    )
}

extension NotificationUpstream {
    /// Through the future.
    public func send(
        _ notification: UpstreamNotification,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (NotificationOutcome) -> Void
    ) {
        self.send(notification, on: eventLoop).whenSuccess(completion)
    }

    /// The future of ``send(_:on:completion:)``: what an implementation that calls back
    /// natively answers ``send(_:on:)`` with (it must implement the callback variant itself).
    public func futureOfCallback(
        _ notification: UpstreamNotification,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<NotificationOutcome> {
        let promise = eventLoop.makePromise(of: NotificationOutcome.self)
        self.send(notification, on: eventLoop) { promise.succeed($0) }
        return promise.futureResult
    }
}

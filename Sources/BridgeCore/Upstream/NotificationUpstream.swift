import LegacyProtocol
import NIOCore

/// The seam between a provider session and the modern APNs provider API.
///
/// The gateway calls ``send(_:on:)`` once for each notification it forwards and feeds the
/// outcome back into the session. An implementation does its own retries (within its retry
/// budget) and maps the HTTP/2 answer to a ``NotificationOutcome``; the future it returns always
/// completes, on any event loop.
public protocol NotificationUpstream: Sendable {
    func send(_ notification: UpstreamNotification, on eventLoop: any EventLoop) -> EventLoopFuture<NotificationOutcome>
}

import LegacyProtocol
import NIOCore

/// One notification on its way upstream: the decoded frame and the tenant it belongs to.
public struct UpstreamNotification: Hashable, Sendable {
    public var tenant: Tenant
    public var frame: NotificationFrame

    public init(tenant: Tenant, frame: NotificationFrame) {
        self.tenant = tenant
        self.frame = frame
    }
}

/// The seam between a provider session and the modern APNs provider API.
///
/// The gateway calls ``send(_:on:)`` once for each notification it forwards and feeds the
/// outcome back into the session. An implementation does its own retries (within its retry
/// budget) and maps the HTTP/2 answer to a ``NotificationOutcome``; the future it returns always
/// completes, on any event loop.
public protocol NotificationUpstream: Sendable {
    func send(_ notification: UpstreamNotification, on eventLoop: any EventLoop) -> EventLoopFuture<NotificationOutcome>
}

import BridgeCore
import LegacyProtocol
import NIOCore

extension ResendRecordStore {
    /// Sends a notification upstream unless it is a resend of one that was already forwarded
    /// (docs/protocol.md#resend-records): then the remembered outcome is reported and nothing is sent.
    ///
    /// Only for a tenant that may hold live resend records (the connection machine's
    /// `.forwardUnlessAnswered`): otherwise the notification goes straight upstream, with no
    /// digest and no claim.
    func forwardUnlessAnswered(
        _ notification: UpstreamNotification,
        to upstream: any NotificationUpstream,
        metrics: GatewayMetrics,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<NotificationOutcome> {
        let key = ResendRecordKey(tenant: notification.tenant.name, frame: notification.frame)
        return self.claim(key, on: eventLoop)
            .flatMap { claim -> EventLoopFuture<NotificationOutcome> in
                switch claim {
                case .answered(let remembered):
                    metrics.resendAnsweredFromRecord()
                    return eventLoop.makeSucceededFuture(remembered)
                case .outcomeUnknown:
                    metrics.resendForwardedAgain()
                    return upstream.send(notification, on: eventLoop)
                case .new:
                    return upstream.send(notification, on: eventLoop)
                }
            }
            .flatMapErrorThrowing { _ in
                // A store failure: forwarding blindly could duplicate; report status 1 instead
                // (the bridge's own decision, so it is never kept as a record's outcome).
                .gaveUp(.processingError)
            }
    }
}

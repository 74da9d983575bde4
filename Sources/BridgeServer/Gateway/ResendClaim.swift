import BridgeCore
import LegacyProtocol
import NIOCore

extension ResendRecordStore {
    /// Sends a notification upstream unless it is a resend of one that was already forwarded
    /// (docs/protocol.md#resend-records): then the remembered outcome is reported
    /// (`remembered` true) and nothing is sent. A remembered outcome is no new answer: it
    /// changes no feedback list and no outcome counter.
    ///
    /// Only for a tenant that may hold live resend records (the connection machine's
    /// `.forwardUnlessAnswered`): otherwise the notification goes straight upstream, with no
    /// digest and no claim.
    func forwardUnlessAnswered(
        _ notification: UpstreamNotification,
        to upstream: any NotificationUpstream,
        metrics: GatewayMetrics,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<(outcome: NotificationOutcome, remembered: Bool)> {
        let key = ResendRecordKey(tenant: notification.tenant.name, frame: notification.frame)
        return self.claim(key, on: eventLoop)
            .flatMap { claim -> EventLoopFuture<(outcome: NotificationOutcome, remembered: Bool)> in
                switch claim {
                case .answered(let remembered):
                    metrics.resendAnsweredFromRecord()
                    return eventLoop.makeSucceededFuture((remembered, true))
                case .outcomeUnknown(let firstID):
                    // Under the first attempt's id when the record kept it: APNs coalesces the
                    // two on the device (docs/upstream.md#collapse-id).
                    metrics.resendForwardedAgain()
                    let resend = firstID.map { notification.resent(as: $0) } ?? notification
                    return upstream.send(resend, on: eventLoop).map { ($0, false) }
                case .new:
                    return upstream.send(notification, on: eventLoop).map { ($0, false) }
                }
            }
            .flatMapErrorThrowing { _ in
                // A store failure: forwarding blindly could duplicate; report status 1 instead
                // (the bridge's own decision, so it is never kept as a record's outcome).
                (.gaveUp(.processingError), false)
            }
    }
}

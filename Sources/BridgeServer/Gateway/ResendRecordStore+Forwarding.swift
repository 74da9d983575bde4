import BridgeCore
import LegacyProtocol
import NIOCore

extension ResendRecordStore {
    /// Claims the notification's resend record, then does the claim's step
    /// (``ResendClaim/step(for:)``, docs/protocol.md#resend-records): reports the remembered
    /// outcome (`remembered` true) or sends the notification upstream. A remembered outcome is
    /// no new answer: it changes no feedback list and no outcome counter.
    ///
    /// Only for a tenant that may hold live resend records (the connection machine's
    /// `.forward` with `claimFirst`): otherwise the notification goes straight upstream, with no
    /// digest and no claim.
    ///
    /// What is answered here without APNs goes in the push log (`pushLog`); the forwarder
    /// logs what it sends.
    func forwardUnlessAnswered(
        _ notification: ForwardedNotification,
        to forwarder: any NotificationForwarder,
        metrics: GatewayMetrics,
        pushLog: PushLog?,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<(outcome: NotificationOutcome, remembered: Bool)> {
        let key = ResendRecordKey(tenant: notification.tenant.name, frame: notification.frame)
        return self.claim(key, on: eventLoop)
            .flatMap { claim -> EventLoopFuture<(outcome: NotificationOutcome, remembered: Bool)> in
                switch claim.step(for: notification) {
                case .report(let remembered):
                    metrics.resendAnsweredFromRecord()
                    pushLog?.record(notification, outcome: remembered, resendMatched: true)
                    return eventLoop.makeSucceededFuture((remembered, true))
                case .send(let notification, let forwardedAgain):
                    if forwardedAgain { metrics.resendForwardedAgain() }
                    return forwarder.send(notification, on: eventLoop).map { ($0, false) }
                }
            }
            .flatMapErrorThrowing { _ in
                // A store failure: forwarding blindly could duplicate; report status 1 instead
                // (the bridge's own decision, so it is never kept as a record's outcome).
                pushLog?.record(notification, outcome: .gaveUp(.processingError), failure: "resend records unreadable")
                return (.gaveUp(.processingError), false)
            }
    }
}

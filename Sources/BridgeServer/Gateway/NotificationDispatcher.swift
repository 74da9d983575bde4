import BridgeCore
import LegacyProtocol
import NIOCore

/// Sends a forwarded notification upstream, unless it is a resend of one that was already
/// forwarded (CONTRACT §1.6): then the remembered outcome is reported and nothing is sent.
///
/// While the tenant can hold no live resend record (the normal case: no error and no shutdown
/// in the record window), the notification goes straight upstream: no digest, no store.
package struct NotificationDispatcher: Sendable {
    var upstream: any NotificationUpstream
    var resendRecords: any ResendRecordStore

    package init(upstream: any NotificationUpstream, resendRecords: any ResendRecordStore) {
        self.upstream = upstream
        self.resendRecords = resendRecords
    }

    func dispatch(_ notification: UpstreamNotification, on eventLoop: any EventLoop) -> EventLoopFuture<NotificationOutcome> {
        guard self.resendRecords.mayHoldLiveRecords(tenant: notification.tenant.name) else {
            return self.upstream.send(notification, on: eventLoop)
        }
        let key = ResendRecordKey(tenant: notification.tenant.name, frame: notification.frame)
        let upstream = self.upstream
        return self.resendRecords.claim(key, on: eventLoop)
            .flatMap { claim -> EventLoopFuture<NotificationOutcome> in
                switch claim {
                case .answered(let remembered):
                    GatewayMetrics.shared.resendAnsweredFromRecord()
                    return eventLoop.makeSucceededFuture(remembered)
                case .outcomeUnknown:
                    GatewayMetrics.shared.resendForwardedAgain()
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

import BridgeCore
import NIOCore
import UpstreamAPNs

/// The forwarder's entry in the push log (docs/operations.md#did-it-go): it is where a legacy
/// notification meets the `apns-id` it was sent with and APNs' answer.
extension APNsForwarder {
    /// Keeps what APNs answered `notification`, and what the provider is told.
    func record(
        _ notification: ForwardedNotification,
        result: APNsSendResult,
        summary: APNsSendSummary,
        outcome: NotificationOutcome
    ) {
        guard let pushLog = self.pushLog else { return }
        let status: UInt16
        let reason: APNsReason?
        var uniqueID: String?
        var failure: String?
        switch result {
        case .answered(let response):
            status = UInt16(clamping: response.status)
            reason = response.reason
            uniqueID = response.uniqueID
        case .unanswered(let sendFailure, let lastResponse):
            status = 0
            reason = lastResponse?.reason
            failure = "\(sendFailure.kind)"
        }
        // The common case, a 200 from production, has no string to keep: no allocation.
        pushLog.record(
            PushLogEntry(
                notification,
                forwardedAt: summary.sentAt,
                keepingTokenBytes: pushLog.keepsFullTokens,
                status: status,
                attempts: UInt16(clamping: summary.attempts),
                microseconds: UInt32(clamping: summary.elapsed.nanoseconds / 1000),
                outcome: outcome,
                uniqueID: uniqueID,
                reason: reason?.rawValue,
                failure: failure
            )
        )
    }
}

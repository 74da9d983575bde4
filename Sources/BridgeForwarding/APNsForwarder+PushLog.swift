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
        var entry = PushLogEntry(
            notification,
            outcome: outcome,
            received: PushLog.milliseconds(before: summary.elapsed.nanoseconds),
            keepingTokenBytes: pushLog.keepsFullTokens
        )
        entry.attempts = UInt16(clamping: summary.attempts)
        entry.microseconds = UInt32(clamping: summary.elapsed.nanoseconds / 1000)
        switch result {
        case .answered(let response):
            entry.status = UInt16(clamping: response.status)
            // The common case, a 200, has neither: no string is kept.
            entry.reason = response.reason?.rawValue
            entry.uniqueID = response.uniqueID
        case .unanswered(let failure, let lastResponse):
            entry.failure = "\(failure.kind)"
            entry.reason = lastResponse?.reason?.rawValue
        }
        pushLog.record(entry)
    }

    /// Keeps a notification the forwarder could not send at all (no endpoint for it).
    func record(_ notification: ForwardedNotification, outcome: NotificationOutcome, failure: String) {
        guard let pushLog = self.pushLog else { return }
        var entry = PushLogEntry(
            notification,
            outcome: outcome,
            received: PushLog.milliseconds(),
            keepingTokenBytes: pushLog.keepsFullTokens
        )
        entry.failure = failure
        pushLog.record(entry)
    }
}

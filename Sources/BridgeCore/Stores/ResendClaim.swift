import LegacyProtocol
import NIOCore

/// What a claim found for a notification that may be a resend (docs/protocol.md#resend-records).
public enum ResendClaim: Hashable, Sendable, CustomStringConvertible {
    /// No live record: the notification is new; forward it.
    case new
    /// A resend of a notification APNs answered: report this outcome, send nothing.
    case answered(NotificationOutcome)
    /// A resend of a notification whose outcome can no longer arrive: the process that forwarded
    /// it stopped or crashed with it in flight, or the bridge gave up on it. Forward it again
    /// (at-least-once, as if there were no bridge); never wait, never invent a failure. The id
    /// is the one the record kept (`nil` for a record written before ids were kept): the resend
    /// goes upstream under it, so APNs coalesces it with the first attempt on the device.
    case outcomeUnknown(firstSentAs: ForwardedNotification.ID?)

    /// The claim of a record that holds `outcome`.
    public init(recorded outcome: NotificationOutcome, firstSentAs id: ForwardedNotification.ID?) {
        self = outcome.isUpstreamAnswer ? .answered(outcome) : .outcomeUnknown(firstSentAs: id)
    }

    /// What is done with the notification this claim was made for.
    public enum Step: Hashable, Sendable {
        /// Report the remembered outcome; send nothing.
        case report(NotificationOutcome)
        /// Send `notification`; `forwardedAgain` for a resend whose first outcome can no longer
        /// arrive.
        case send(ForwardedNotification, forwardedAgain: Bool)
    }

    /// The step for `notification`: a resend forwarded again goes upstream under its first
    /// attempt's id when the record kept it, so APNs coalesces the two on the device
    /// (docs/upstream.md#collapse-id).
    public func step(for notification: ForwardedNotification) -> Step {
        switch self {
        case .new:
            .send(notification, forwardedAgain: false)
        case .answered(let outcome):
            .report(outcome)
        case .outcomeUnknown(let firstID):
            .send(firstID.map { notification.resent(as: $0) } ?? notification, forwardedAgain: true)
        }
    }

    public var description: String {
        switch self {
        case .new: "new"
        case .answered(let outcome): "answered(\(outcome))"
        case .outcomeUnknown: "outcomeUnknown"
        }
    }
}

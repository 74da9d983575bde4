import LegacyProtocol
import NIOCore

/// A notification that was forwarded after the one an error-response (or a status-10 packet)
/// names, so the provider will resend it; `outcome` is `nil` while the upstream has not answered.
/// `notificationID` is the id it went upstream with: a resend forwarded again reuses it as its
/// `apns-id` and collapse id, so the device shows one of the two (docs/upstream.md#collapse-id).
///
/// Only an answer APNs gave is kept (``NotificationOutcome/isUpstreamAnswer``): an outcome the
/// bridge decided itself (`gaveUp`, `dropped`) leaves the record's outcome unknown.
public struct ResendRecord: Hashable, Sendable {
    public var key: ResendRecordKey
    public var outcome: NotificationOutcome?
    public var notificationID: ForwardedNotification.ID?

    public init(key: ResendRecordKey, outcome: NotificationOutcome?, notificationID: ForwardedNotification.ID? = nil) {
        self.key = key
        self.outcome = outcome
        self.notificationID = notificationID
    }
}

extension ResendRecordStore {
    /// A store that only this process writes knows its records already.
    public func refreshLiveRecords(tenant: String, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        eventLoop.makeSucceededVoidFuture()
    }
}

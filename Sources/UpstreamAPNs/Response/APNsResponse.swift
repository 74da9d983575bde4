import NIOCore

/// An HTTP/2 answer from APNs: status, `apns-id` (or `apns-request-id`), `apns-unique-id`, for
/// errors the reason and (410) timestamp, and for channel management the channel id and body.
public struct APNsResponse: Hashable, Sendable {
    public var status: Int
    /// `apns-id` from the device API, `apns-request-id` from the broadcast and channel APIs.
    public var apnsID: String?
    /// `apns-unique-id`: sent by the development environment only, to look a notification up in
    /// Apple's delivery log.
    public var uniqueID: String?
    public var reason: APNsReason?
    /// Milliseconds since 1970, sent with 410.
    public var timestamp: UInt64?
    /// `apns-channel-id`: the id of a channel the channel management API created.
    public var channelID: String?
    /// The body of a successful answer that had one (up to the client's limit): a channel
    /// management answer. An error's body is read into ``reason`` and ``timestamp``.
    public var body: ByteBuffer?

    public init(
        status: Int,
        apnsID: String?,
        uniqueID: String? = nil,
        reason: APNsReason? = nil,
        timestamp: UInt64? = nil,
        channelID: String? = nil,
        body: ByteBuffer? = nil
    ) {
        self.status = status
        self.apnsID = apnsID
        self.uniqueID = uniqueID
        self.reason = reason
        self.timestamp = timestamp
        self.channelID = channelID
        self.body = body
    }

    /// 200 (201 and 204 from the channel management API).
    public var isSuccess: Bool { (200..<300).contains(self.status) }

    /// APNs took the notification (200 from the device or broadcast API). The one place that
    /// says so: the client answers it without a retry decision, the bridge maps it to a
    /// delivered frame.
    public var isAccepted: Bool { self.status == 200 }
}

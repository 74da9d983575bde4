import NIOCore

/// An HTTP/2 answer from APNs: status, `apns-id` (or `apns-request-id`), `apns-unique-id`, for
/// errors the reason and (410) timestamp, and for channel management the channel id and body.
public struct APNsResponse: Hashable, Sendable {
    private struct Fields: Hashable {
        var status: Int
        var apnsID: String?
        var uniqueID: String?
        var reason: APNsReason?
        var timestamp: UInt64?
        var channelID: String?
        var body: ByteBuffer?
    }

    /// The fields, in one box every copy shares. An answer is handed up through the connection's
    /// completion, the pool's attempt result and the client's send result: a copy is then one
    /// retain of the box, where a copy of the fields was one per string and buffer
    /// (docs/performance-log.md, "Copies of a request and of its answer").
    private let box: ImmutableBox<Fields>

    public var status: Int { self.box.value.status }
    /// `apns-id` from the device API, `apns-request-id` from the broadcast and channel APIs.
    public var apnsID: String? { self.box.value.apnsID }
    /// `apns-unique-id`: sent by the development environment only, to look a notification up in
    /// Apple's delivery log.
    public var uniqueID: String? { self.box.value.uniqueID }
    public var reason: APNsReason? { self.box.value.reason }
    /// Milliseconds since 1970, sent with 410.
    public var timestamp: UInt64? { self.box.value.timestamp }
    /// `apns-channel-id`: the id of a channel the channel management API created.
    public var channelID: String? { self.box.value.channelID }
    /// The body of a successful answer that had one (up to the client's limit): a channel
    /// management answer. An error's body is read into ``reason`` and ``timestamp``.
    public var body: ByteBuffer? { self.box.value.body }

    public init(
        status: Int,
        apnsID: String?,
        uniqueID: String? = nil,
        reason: APNsReason? = nil,
        timestamp: UInt64? = nil,
        channelID: String? = nil,
        body: ByteBuffer? = nil
    ) {
        self.box = ImmutableBox(
            Fields(
                status: status,
                apnsID: apnsID,
                uniqueID: uniqueID,
                reason: reason,
                timestamp: timestamp,
                channelID: channelID,
                body: body
            )
        )
    }

    /// 200 (201 and 204 from the channel management API).
    public var isSuccess: Bool { (200..<300).contains(self.status) }

    /// APNs took the notification (200 from the device or broadcast API). The one place that
    /// says so: the client answers it without a retry decision, the bridge maps it to a
    /// delivered frame.
    public var isAccepted: Bool { self.status == 200 }

    public static func == (lhs: APNsResponse, rhs: APNsResponse) -> Bool {
        lhs.box === rhs.box || lhs.box.value == rhs.box.value
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.box.value)
    }
}

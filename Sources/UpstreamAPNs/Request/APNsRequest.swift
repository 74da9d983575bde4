import BridgeCore
import LegacyProtocol
import NIOCore
import NIOHPACK

/// One notification as an HTTP/2 request to APNs, built once and reused for every attempt
/// (the `apns-id` stays the same across retries).
public struct APNsRequest: Sendable {
    /// `/3/device/<lowercase hex token>`.
    public var path: String
    public var topic: String?
    public var pushType: APNsPushType
    /// 10, 5 or 1.
    public var priority: UInt8
    /// UNIX seconds; 0 means "deliver once or not at all".
    public var expiration: UInt32
    public var apnsID: String
    public var payload: ByteBuffer
    /// The legacy identifier, for logs.
    public var legacyIdentifier: NotificationIdentifier

    public init(
        path: String,
        topic: String?,
        pushType: APNsPushType,
        priority: UInt8,
        expiration: UInt32,
        apnsID: String,
        payload: ByteBuffer,
        legacyIdentifier: NotificationIdentifier = NotificationIdentifier(rawValue: 0)
    ) {
        self.path = path
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.apnsID = apnsID
        self.payload = payload
        self.legacyIdentifier = legacyIdentifier
    }

    /// Maps a legacy notification (CONTRACT §2): push type inferred, and background
    /// notifications always sent with priority 5, as Apple requires.
    public init(_ notification: UpstreamNotification, apnsID: String) {
        let pushType = APNsPushType.infer(topic: notification.tenant.topic, payload: notification.frame.payload)
        self.init(
            path: notification.path,
            topic: notification.tenant.topic,
            pushType: pushType,
            priority: pushType == .background ? 5 : notification.frame.priority,
            expiration: notification.frame.expiration,
            apnsID: apnsID,
            payload: notification.frame.payload,
            legacyIdentifier: notification.frame.identifier
        )
    }
}

/// Builds the header block of one request, with HPACK indexing as Apple asks: `:path` and
/// `authorization` are never put in the dynamic table (each value is used once, or is a secret);
/// `apns-id` and `apns-expiration` are indexed the first time on a connection (so their names
/// enter the table) and sent as literals without indexing after that; the rest are indexed.
public struct APNsRequestHeaderEncoder: Sendable {
    public var authority: String
    private var hasIndexedChangingNames = false

    public init(authority: String) {
        self.authority = authority
    }

    public mutating func headers(for request: APNsRequest, authorization: String?) -> HPACKHeaders {
        let changing: HPACKIndexing = self.hasIndexedChangingNames ? .nonIndexable : .indexable
        self.hasIndexedChangingNames = true
        var headers = HPACKHeaders()
        headers.reserveCapacity(10)
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":path", value: request.path, indexing: .nonIndexable)
        headers.add(name: ":authority", value: self.authority)
        if let authorization {
            headers.add(name: "authorization", value: authorization, indexing: .neverIndexed)
        }
        headers.add(name: "apns-id", value: request.apnsID, indexing: changing)
        headers.add(name: "apns-expiration", value: String(request.expiration), indexing: changing)
        headers.add(name: "apns-priority", value: Self.priorityValue(request.priority))
        if let topic = request.topic {
            headers.add(name: "apns-topic", value: topic)
        }
        headers.add(name: "apns-push-type", value: request.pushType.rawValue)
        headers.add(name: "content-length", value: String(request.payload.readableBytes))
        return headers
    }

    private static func priorityValue(_ priority: UInt8) -> String {
        switch priority {
        case 10: "10"
        case 5: "5"
        case 1: "1"
        default: String(priority)
        }
    }
}

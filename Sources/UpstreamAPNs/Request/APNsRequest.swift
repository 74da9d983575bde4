import NIOCore
import NIOHPACK

/// One notification as an HTTP/2 request to APNs (`POST /3/device/<token>`), built once and
/// reused for every attempt (the `apns-id` stays the same across retries).
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

    public init(
        path: String,
        topic: String?,
        pushType: APNsPushType,
        priority: UInt8,
        expiration: UInt32,
        apnsID: String,
        payload: ByteBuffer
    ) {
        self.path = path
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.apnsID = apnsID
        self.payload = payload
    }

    /// A request to a device token (the raw bytes; the path holds them in lowercase hex).
    public init(
        deviceToken: ByteBuffer,
        topic: String?,
        pushType: APNsPushType,
        priority: UInt8,
        expiration: UInt32,
        apnsID: String,
        payload: ByteBuffer
    ) {
        self.init(
            path: Self.devicePath(deviceToken),
            topic: topic,
            pushType: pushType,
            priority: priority,
            expiration: expiration,
            apnsID: apnsID,
            payload: payload
        )
    }

    /// `/3/device/<lowercase hex token>`, in one allocation.
    public static func devicePath(_ token: ByteBuffer) -> String {
        let prefix: StaticString = "/3/device/"
        return String(unsafeUninitializedCapacity: prefix.utf8CodeUnitCount + 2 * token.readableBytes) { output in
            var position = 0
            prefix.withUTF8Buffer { bytes in
                for byte in bytes {
                    output[position] = byte
                    position += 1
                }
            }
            token.withUnsafeReadableBytes { bytes in
                for byte in bytes {
                    output[position] = Self.hexDigit(byte >> 4)
                    output[position + 1] = Self.hexDigit(byte & 0x0F)
                    position += 2
                }
            }
            return position
        }
    }

    @inline(__always)
    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") - 10 + nibble
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

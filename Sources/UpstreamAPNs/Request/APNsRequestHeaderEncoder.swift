import NIOCore
import NIOHPACK

/// Builds the header block of one request, with HPACK indexing as Apple asks: a device
/// request's `:path` and every `authorization` are never put in the dynamic table (each value is
/// used once, or is a secret); the request id and `apns-expiration` are indexed the first time on
/// a connection (so their names enter the table) and sent as literals without indexing after
/// that; the rest are indexed.
///
/// Not part of the library's API: both engines use it, and the Benchmarks package (a package
/// of its own) measures it through `@_spi(Benchmarks) import UpstreamAPNs`.
@_spi(Benchmarks)
public struct APNsRequestHeaderEncoder: Sendable {
    public var authority: String
    private var hasIndexedChangingNames = false

    public init(authority: String) {
        self.authority = authority
    }

    public mutating func headers(for request: APNsRequest, authorization: String?) -> HPACKHeaders {
        var headers = HPACKHeaders()
        headers.reserveCapacity(10)
        self.forEachField(of: request, authorization: authorization) { name, value, indexing in
            headers.add(name: name, value: value, indexing: indexing)
        }
        return headers
    }

    /// The same fields in the same order, handed one by one to `field` without building
    /// `HPACKHeaders` (the libnghttp2 engine copies them straight into its name/value array).
    public mutating func forEachField(
        of request: APNsRequest,
        authorization: String?,
        _ field: (_ name: String, _ value: String, _ indexing: HPACKIndexing) -> Void
    ) {
        let changing: HPACKIndexing = self.hasIndexedChangingNames ? .nonIndexable : .indexable
        self.hasIndexedChangingNames = true
        // A device's path names one device, used once: never indexed. A broadcast's or a
        // channel request's path names the app, the same every time: indexed.
        let (method, pathIndexing): (String, HPACKIndexing) =
            switch request.kind {
            case .device: ("POST", .nonIndexable)
            case .broadcast: ("POST", .indexable)
            case .channelManagement(let method, _): (method, .indexable)
            }
        field(":method", method, .indexable)
        field(":scheme", "https", .indexable)
        field(":path", request.path, pathIndexing)
        field(":authority", self.authority, .indexable)
        if let authorization {
            field("authorization", authorization, .neverIndexed)
        }
        switch request.kind {
        case .device:
            field("apns-id", request.apnsID, changing)
            field("apns-expiration", String(request.expiration), changing)
            field("apns-priority", Self.priorityValue(request.priority), .indexable)
            if let topic = request.topic {
                field("apns-topic", topic, .indexable)
            }
            field("apns-push-type", request.pushType.rawValue, .indexable)
        case .broadcast(let channelID):
            field("apns-request-id", request.apnsID, changing)
            field("apns-channel-id", channelID, .indexable)
            field("apns-expiration", String(request.expiration), changing)
            field("apns-priority", Self.priorityValue(request.priority), .indexable)
            field("apns-push-type", request.pushType.rawValue, .indexable)
        case .channelManagement(_, let channelID):
            field("apns-request-id", request.apnsID, changing)
            if let channelID {
                field("apns-channel-id", channelID, .indexable)
            }
            if request.payload.readableBytes > 0 {
                field("content-type", "application/json", .indexable)
            }
        }
        field("content-length", String(request.payload.readableBytes), .indexable)
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

import NIOCore
import NIOHPACK

/// Builds the header block of one request, with HPACK indexing as Apple asks: a device
/// request's `:path` and every `authorization` are never put in the dynamic table (each value is
/// used once, or is a secret); the request id, `apns-collapse-id` and `apns-expiration` are
/// indexed the first time on a connection (so their names enter the table) and sent as literals
/// without indexing after that; the rest are indexed.
///
/// A device request's `apns-collapse-id` is its id: every attempt of one notification sends the
/// same request, so a duplicate that at-least-once delivery cannot avoid replaces the first on
/// the device rather than showing twice, and two notifications never share one
/// (docs/upstream.md#collapse-id).
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
        headers.reserveCapacity(12)
        // A device request sends its id twice (`apns-id`, `apns-collapse-id`): one `String` for
        // both. And the one name longer than a small string's 15 bytes is a constant, so that
        // no name costs an allocation.
        var idText: String?
        self.forEachField(of: request, authorization: authorization) { name, value, indexing in
            let text: String
            if case .uuid = value {
                text = idText ?? value.string
                idText = text
            } else {
                text = value.string
            }
            headers.add(name: Self.nameText(name), value: text, indexing: indexing)
        }
        return headers
    }

    /// The same fields in the same order, handed one by one to `field` without building
    /// `HPACKHeaders` (the libnghttp2 engine writes them straight into its header block, and
    /// points at the constant names and values where they lie).
    public mutating func forEachField(
        of request: APNsRequest,
        authorization: String?,
        _ field: (_ name: StaticString, _ value: APNsHeaderValue, _ indexing: HPACKIndexing) -> Void
    ) {
        let fields = request.fields
        let changing: HPACKIndexing = self.hasIndexedChangingNames ? .nonIndexable : .indexable
        self.hasIndexedChangingNames = true
        // A device's path names one device, used once: never indexed. A broadcast's or a
        // channel request's path names the app, the same every time: indexed.
        let (method, pathIndexing): (APNsHeaderValue, HPACKIndexing) =
            switch fields.kind {
            case .device: (.literal("POST"), .nonIndexable)
            case .broadcast: (.literal("POST"), .indexable)
            case .channelManagement(let method, _): (.text(method), .indexable)
            }
        field(":method", method, .indexable)
        field(":scheme", .literal("https"), .indexable)
        field(":path", APNsHeaderValue(fields.path), pathIndexing)
        field(":authority", .text(self.authority), .indexable)
        if let authorization {
            field("authorization", .text(authorization), .neverIndexed)
        }
        switch fields.kind {
        case .device:
            field("apns-id", APNsHeaderValue(fields.id), changing)
            field("apns-collapse-id", APNsHeaderValue(fields.id), changing)
            field("apns-expiration", .decimal(UInt64(fields.expiration)), changing)
            field("apns-priority", Self.priorityValue(fields.priority), .indexable)
            if let topic = fields.topic {
                field("apns-topic", .text(topic), .indexable)
            }
            field("apns-push-type", .text(fields.pushType.rawValue), .indexable)
        case .broadcast(let channelID):
            field("apns-request-id", APNsHeaderValue(fields.id), changing)
            field("apns-channel-id", .text(channelID), .indexable)
            field("apns-expiration", .decimal(UInt64(fields.expiration)), changing)
            field("apns-priority", Self.priorityValue(fields.priority), .indexable)
            field("apns-push-type", .text(fields.pushType.rawValue), .indexable)
        case .channelManagement(_, let channelID):
            field("apns-request-id", APNsHeaderValue(fields.id), changing)
            if let channelID {
                field("apns-channel-id", .text(channelID), .indexable)
            }
            if fields.payload.readableBytes > 0 {
                field("content-type", .literal("application/json"), .indexable)
            }
        }
        field("content-length", .decimal(UInt64(fields.payload.readableBytes)), .indexable)
    }

    private static let collapseIDName = "apns-collapse-id"

    private static func nameText(_ name: StaticString) -> String {
        guard name.utf8CodeUnitCount > 15 else { return name.description }
        assert(name.description == Self.collapseIDName, "a long header name without its constant")
        return Self.collapseIDName
    }

    private static func priorityValue(_ priority: UInt8) -> APNsHeaderValue {
        switch priority {
        case 10: .literal("10")
        case 5: .literal("5")
        case 1: .literal("1")
        default: .decimal(UInt64(priority))
        }
    }
}

/// One header value as the encoder hands it over. The libnghttp2 engine points at a literal's
/// bytes where they lie and writes every other value straight into its header block; the
/// NIOHTTP2 engine reads each as text (``string``). No `String` is made for a number, a
/// device path or a generated id on the libnghttp2 path (each was work, or an allocation, per
/// request).
@_spi(Benchmarks)
public enum APNsHeaderValue {
    case text(String)
    /// A constant value (`POST`, `https`, a priority), read in place.
    case literal(StaticString)
    /// A non-negative number in decimal (`apns-expiration`, `content-length`).
    case decimal(UInt64)
    /// `/3/device/<lowercase hex token>`.
    case devicePath(token: ByteBuffer)
    /// A UUID, lowercase 8-4-4-4-12.
    case uuid(high: UInt64, low: UInt64)

    init(_ path: APNsRequest.Path) {
        switch path {
        case .device(let token): self = .devicePath(token: token)
        case .text(let text): self = .text(text)
        }
    }

    init(_ id: APNsRequestID) {
        switch id.storage {
        case .uuid(let high, let low): self = .uuid(high: high, low: low)
        case .text(let text): self = .text(text)
        }
    }

    /// The value as text.
    public var string: String {
        switch self {
        case .text(let text): text
        case .literal(let literal): literal.description
        case .decimal(let number): String(number)
        case .devicePath(let token): APNsRequest.devicePath(token)
        case .uuid(let high, let low): APNsRequestID(high: high, low: low).description
        }
    }

    /// How many bytes ``write(into:)`` writes.
    public var byteCount: Int {
        switch self {
        case .text(let text): text.utf8.count
        case .literal(let literal): literal.utf8CodeUnitCount
        case .decimal(let number): Self.digitCount(number)
        case .devicePath(let token): APNsRequest.devicePathLength(token)
        case .uuid: APNsRequestID.uuidLength
        }
    }

    /// Writes the value's bytes (UTF-8) at the start of `output`, which holds at least
    /// ``byteCount`` bytes; returns how many it wrote.
    @discardableResult
    public func write(into output: UnsafeMutableRawBufferPointer) -> Int {
        switch self {
        case .text(let text):
            let count = text.utf8.count
            precondition(output.count >= count)
            let copied: Void? = text.utf8.withContiguousStorageIfAvailable {
                output.baseAddress!.copyMemory(from: $0.baseAddress!, byteCount: count)
            }
            if copied == nil {
                UnsafeMutableRawBufferPointer(rebasing: output[..<count]).copyBytes(from: text.utf8)
            }
            return count
        case .literal(let literal):
            let count = literal.utf8CodeUnitCount
            precondition(output.count >= count)
            output.baseAddress!.copyMemory(from: literal.utf8Start, byteCount: count)
            return count
        case .decimal(var number):
            let count = Self.digitCount(number)
            precondition(output.count >= count)
            var position = count
            repeat {
                position -= 1
                output[position] = UInt8(ascii: "0") + UInt8(number % 10)
                number /= 10
            } while number > 0
            return count
        case .devicePath(let token):
            return APNsRequest.writeDevicePath(token, into: output.bindMemory(to: UInt8.self))
        case .uuid(let high, let low):
            return APNsRequestID.writeUUID(high: high, low: low, into: output.bindMemory(to: UInt8.self))
        }
    }

    private static func digitCount(_ number: UInt64) -> Int {
        var count = 1
        var rest = number
        while rest >= 10 {
            rest /= 10
            count += 1
        }
        return count
    }
}

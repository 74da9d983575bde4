import NIOCore
import NIOHPACK

/// One request to APNs, built once and reused for every attempt (its id stays the same across
/// retries): a notification to a device (`POST /3/device/<token>`), a broadcast to a Live
/// Activity channel (`POST /4/broadcasts/apps/<bundle id>`), or a channel management request
/// (`/1/apps/<bundle id>/channels`).
public struct APNsRequest: Sendable {
    /// Which of APNs' APIs the request is for; it decides the headers sent.
    public enum Kind: Hashable, Sendable {
        /// `apns-id`, `apns-collapse-id` (the same id), `apns-topic`, `apns-push-type`,
        /// `apns-priority`, `apns-expiration`.
        case device
        /// `apns-request-id`, `apns-channel-id`, `apns-push-type: liveactivity`, `apns-priority`,
        /// `apns-expiration`; no topic (the bundle id is in the path).
        case broadcast(channelID: String)
        /// `apns-request-id`, and `apns-channel-id` when the request names a channel; a JSON body
        /// when there is one.
        case channelManagement(method: String, channelID: String?)
    }

    /// A request's path: a device's token, written as `/3/device/<lowercase hex>` only where it
    /// is sent, or a path as given.
    enum Path {
        case device(token: ByteBuffer)
        case text(String)
    }

    struct Fields {
        var kind: Kind
        var path: Path
        var topic: String?
        var pushType: APNsPushType
        var priority: UInt8
        var expiration: UInt32
        var id: APNsRequestID
        var payload: ByteBuffer
    }

    /// The fields, in one box every copy shares. A request is held at each layer it passes through
    /// (the caller's, the client's request in flight, the connection's engine as it writes it):
    /// a copy is then one retain of the box, where a copy of the fields was one per string and
    /// buffer, about 30 per notification (docs/performance-log.md, "Copies of a request and of its
    /// answer").
    private let box: ImmutableBox<Fields>

    /// The fields, for the header encoder: it writes the device path and a generated id as
    /// bytes, with no `String` made for them.
    var fields: Fields { self.box.value }

    public var kind: Kind { self.box.value.kind }
    /// `/3/device/<lowercase hex token>`, `/4/broadcasts/apps/<bundle id>`, … (a device's path
    /// is written out at each call: for logs and tests).
    public var path: String {
        switch self.box.value.path {
        case .device(let token): Self.devicePath(token)
        case .text(let path): path
        }
    }
    public var topic: String? { self.box.value.topic }
    public var pushType: APNsPushType { self.box.value.pushType }
    /// 10, 5 or 1.
    public var priority: UInt8 { self.box.value.priority }
    /// UNIX seconds; 0 means "deliver once or not at all".
    public var expiration: UInt32 { self.box.value.expiration }
    /// Sent as `apns-id` to the device API, as `apns-request-id` to the others (a generated id
    /// is written out at each call: for logs and tests).
    public var apnsID: String { self.box.value.id.description }
    /// The same id, as kept.
    public var id: APNsRequestID { self.box.value.id }
    public var payload: ByteBuffer { self.box.value.payload }

    public init(
        path: String,
        topic: String?,
        pushType: APNsPushType,
        priority: UInt8,
        expiration: UInt32,
        apnsID: String,
        payload: ByteBuffer
    ) {
        self.init(
            Fields(
                kind: .device,
                path: .text(path),
                topic: topic,
                pushType: pushType,
                priority: priority,
                expiration: expiration,
                id: APNsRequestID(apnsID),
                payload: payload
            )
        )
    }

    private init(_ fields: Fields) {
        self.box = ImmutableBox(fields)
    }

    /// A broadcast to a channel (Apple's broadcast push API): `POST /4/broadcasts/apps/<bundle id>`.
    public static func broadcast(
        bundleID: String,
        channelID: String,
        priority: UInt8,
        expiration: UInt32,
        requestID: String,
        payload: ByteBuffer
    ) -> APNsRequest {
        APNsRequest(
            Fields(
                kind: .broadcast(channelID: channelID),
                path: .text("/4/broadcasts/apps/\(bundleID)"),
                topic: nil,
                pushType: .liveactivity,
                priority: priority,
                expiration: expiration,
                id: APNsRequestID(requestID),
                payload: payload
            )
        )
    }

    /// A channel management request (Apple's channel management API).
    ///
    /// - Parameters:
    ///   - method: `POST` (create), `GET` (read one, or all with the `all-channels` path),
    ///     `DELETE`.
    ///   - path: `/1/apps/<bundle id>/channels` or `/1/apps/<bundle id>/all-channels`.
    ///   - channelID: the channel a read or a delete is about (`apns-channel-id`); `nil` to
    ///     create one or list them all.
    ///   - requestID: the `apns-request-id` header.
    ///   - body: the JSON body of a create (its message storage policy and push type).
    public static func channelManagement(
        method: String,
        path: String,
        channelID: String?,
        requestID: String,
        body: ByteBuffer = ByteBuffer()
    ) -> APNsRequest {
        APNsRequest(
            Fields(
                kind: .channelManagement(method: method, channelID: channelID),
                path: .text(path),
                topic: nil,
                pushType: .liveactivity,
                priority: 10,
                expiration: 0,
                id: APNsRequestID(requestID),
                payload: body
            )
        )
    }

    /// A request to a device token (the raw bytes; the path holds them in lowercase hex), with
    /// an id as kept (``APNsIDGenerator/nextID()``, or `APNsRequestID("…")` for an id of the
    /// caller's): neither the path nor a generated id is written as a `String` on the way to
    /// the wire.
    public init(
        deviceToken: ByteBuffer,
        topic: String?,
        pushType: APNsPushType,
        priority: UInt8,
        expiration: UInt32,
        id: APNsRequestID,
        payload: ByteBuffer
    ) {
        self.init(
            Fields(
                kind: .device,
                path: .device(token: deviceToken),
                topic: topic,
                pushType: pushType,
                priority: priority,
                expiration: expiration,
                id: id,
                payload: payload
            )
        )
    }

    /// The first header whose value HTTP/2 cannot carry, if any: a control character (NUL, CR,
    /// LF and the rest of C0 but HTAB, and DEL, which servers such as nghttp2 refuse too) or
    /// leading or trailing white space (RFC 9113 §8.2.1). Checks what comes from outside the
    /// client's own making: the topic, the channel id, the request id and a path that names an
    /// app (a device path is hex the client wrote).
    public var unsendableHeader: String? {
        if let topic = self.topic, !Self.isSendableFieldValue(topic) { return "apns-topic" }
        if case .text(let id) = self.box.value.id.storage, !Self.isSendableFieldValue(id) {
            if case .device = self.kind { return "apns-id" }
            return "apns-request-id"
        }
        switch self.kind {
        case .device:
            return nil
        case .broadcast(let channelID), .channelManagement(_, .some(let channelID)):
            if !Self.isSendableFieldValue(channelID) { return "apns-channel-id" }
        case .channelManagement(_, .none):
            break
        }
        return Self.isSendableFieldValue(self.path) ? nil : ":path"
    }

    /// Whether an HTTP/2 field value can hold `value` (see ``unsendableHeader``).
    public static func isSendableFieldValue(_ value: String) -> Bool {
        // Over the contiguous UTF-8 bytes (a native string's own storage), not `utf8` as a
        // collection (docs/performance-log.md, "Copies, hashes and futures off the path").
        var value = value
        return value.withUTF8 { bytes in
            guard let first = bytes.first, let last = bytes.last else { return true }
            if first == 0x20 || first == 0x09 || last == 0x20 || last == 0x09 { return false }
            for byte in bytes where (byte < 0x20 && byte != 0x09) || byte == 0x7F {
                return false
            }
            return true
        }
    }

    /// `/3/device/<lowercase hex token>`, in one allocation.
    public static func devicePath(_ token: ByteBuffer) -> String {
        String(unsafeUninitializedCapacity: Self.devicePathLength(token)) { output in
            Self.writeDevicePath(token, into: output)
        }
    }

    static func devicePathLength(_ token: ByteBuffer) -> Int {
        Self.devicePathPrefix.utf8CodeUnitCount + 2 * token.readableBytes
    }

    private static let devicePathPrefix: StaticString = "/3/device/"

    /// Writes `/3/device/<lowercase hex token>` at the start of `output` (at least
    /// ``devicePathLength(_:)`` bytes); returns the bytes written.
    @discardableResult
    static func writeDevicePath(_ token: ByteBuffer, into output: UnsafeMutableBufferPointer<UInt8>) -> Int {
        precondition(output.count >= Self.devicePathLength(token))
        var position = 0
        Self.devicePathPrefix.withUTF8Buffer { bytes in
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

    /// The lowercase hex digit of a nibble (0–15); the request id's UUID is written with it too.
    @inline(__always)
    static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") - 10 + nibble
    }
}

/// An `apns-id` (or `apns-request-id`): one the bridge made, kept as the 128 bits of its UUID
/// until it is written, or text from elsewhere (a caller's own request id). Two ids are equal
/// when they are kept the same way: a UUID and the same UUID as text are not.
public struct APNsRequestID: Sendable, Hashable, CustomStringConvertible {
    enum Storage: Sendable, Hashable {
        case uuid(high: UInt64, low: UInt64)
        case text(String)
    }

    let storage: Storage

    /// A UUID, written in the lowercase 8-4-4-4-12 form.
    public init(high: UInt64, low: UInt64) {
        self.storage = .uuid(high: high, low: low)
    }

    /// An id as the caller wrote it.
    public init(_ text: String) {
        self.storage = .text(text)
    }

    /// The text of the id (an allocation for a UUID: for logs and tests, not the request path).
    public var description: String {
        switch self.storage {
        case .uuid(let high, let low):
            String(unsafeUninitializedCapacity: Self.uuidLength) { buffer in
                Self.writeUUID(high: high, low: low, into: buffer)
            }
        case .text(let text):
            text
        }
    }

    static let uuidLength = 36

    /// Writes the lowercase 8-4-4-4-12 form into the first 36 bytes of `buffer`; returns 36.
    @discardableResult
    static func writeUUID(high: UInt64, low: UInt64, into buffer: UnsafeMutableBufferPointer<UInt8>) -> Int {
        precondition(buffer.count >= Self.uuidLength)
        var position = 0
        func put(_ value: UInt64, nibbles: Int) {
            var shift = (nibbles - 1) * 4
            while shift >= 0 {
                buffer[position] = APNsRequest.hexDigit(UInt8(truncatingIfNeeded: value >> UInt64(shift)) & 0x0F)
                position += 1
                shift -= 4
            }
        }
        func dash() {
            buffer[position] = UInt8(ascii: "-")
            position += 1
        }
        put(high >> 32, nibbles: 8)
        dash()
        put(high >> 16, nibbles: 4)
        dash()
        put(high, nibbles: 4)
        dash()
        put(low >> 48, nibbles: 4)
        dash()
        put(low, nibbles: 12)
        return position
    }
}

/// A value shared by every copy of the struct that holds it: copying that struct is then one
/// retain, whatever strings and buffers the value holds. `APNsRequest` and `APNsResponse` keep
/// their fields in one, as each passes through five or six layers that keep a copy
/// (docs/performance-log.md, "Copies of a request and of its answer").
final class ImmutableBox<Value: Sendable>: Sendable {
    let value: Value

    init(_ value: Value) {
        self.value = value
    }
}

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

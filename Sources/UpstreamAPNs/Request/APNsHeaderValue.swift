import NIOCore

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

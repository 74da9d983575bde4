import NIOCore

/// One header value as the encoder hands it over: text, or a device path or generated id kept
/// as bytes and numbers, which the libnghttp2 engine writes straight into its header bytes (a
/// `String` for each was an allocation per request) and the NIOHTTP2 engine writes out as text.
@_spi(Benchmarks)
public enum APNsHeaderValue {
    case text(String)
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
        case .devicePath(let token): APNsRequest.devicePath(token)
        case .uuid(let high, let low): APNsRequestID(high: high, low: low).description
        }
    }

    /// Appends the value's bytes to `bytes`, with no `String` made on the way.
    public func append(to bytes: inout [UInt8]) {
        switch self {
        case .text(let text):
            let copied: Void? = text.utf8.withContiguousStorageIfAvailable { bytes.append(contentsOf: $0) }
            if copied == nil {
                bytes.append(contentsOf: text.utf8)
            }
        case .devicePath(let token):
            Self.append(length: APNsRequest.devicePathLength(token), to: &bytes) {
                APNsRequest.writeDevicePath(token, into: $0)
            }
        case .uuid(let high, let low):
            Self.append(length: APNsRequestID.uuidLength, to: &bytes) {
                APNsRequestID.writeUUID(high: high, low: low, into: $0)
            }
        }
    }

    /// Writes `length` bytes on the stack, then appends them (an array cannot grow uninitialised).
    private static func append(
        length: Int,
        to bytes: inout [UInt8],
        _ write: (UnsafeMutableBufferPointer<UInt8>) -> Int
    ) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: length) { scratch in
            let written = write(scratch)
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: scratch[..<written]))
        }
    }
}

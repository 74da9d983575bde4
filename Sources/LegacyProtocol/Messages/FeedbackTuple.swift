import NIOCore

/// One entry of the feedback service.
///
/// ```
/// +-----------+--------------+--------------------+
/// | timestamp | token length | device token       |
/// | 4 B time_t| 2 B          | token length bytes |
/// +-----------+--------------+--------------------+
/// ```
/// Big-endian. The timestamp is when the upstream decided the app no longer exists on the device.
public struct FeedbackTuple: Hashable, Sendable {
    public var timestamp: UInt32
    public var deviceToken: ByteBuffer

    public init(timestamp: UInt32, deviceToken: ByteBuffer) {
        self.timestamp = timestamp
        self.deviceToken = deviceToken
    }
}

extension FeedbackTuple {
    /// The most plaintext one TLS record carries (2^14 bytes).
    public static let maximumRecordPlaintext = 16_384

    /// The tuple's bytes on the wire: timestamp, token length, token.
    public var encodedLength: Int { 6 + self.deviceToken.readableBytes }

    /// `tuples` encoded into buffers of whole tuples, each at most ``maximumRecordPlaintext``
    /// bytes (431 tuples of 32-byte tokens). Written one buffer per write, each becomes one TLS
    /// record, so no tuple straddles two records: some clients (both Go libraries) read one
    /// tuple per `Read`, which returns at most the rest of one record (docs/protocol.md,
    /// "Feedback service").
    public static func recordSizedBuffers(
        _ tuples: some Collection<FeedbackTuple>,
        allocator: ByteBufferAllocator
    ) -> [ByteBuffer] {
        // A capacity hint: the size of a batch of classic 38-byte tuples, at most one record.
        let capacity = Swift.min(Self.maximumRecordPlaintext, tuples.count * 38)
        var buffers: [ByteBuffer] = []
        var current = allocator.buffer(capacity: capacity)
        for tuple in tuples {
            if current.readableBytes + tuple.encodedLength > Self.maximumRecordPlaintext, current.readableBytes > 0 {
                buffers.append(current)
                current = allocator.buffer(capacity: capacity)
            }
            current.writeFeedbackTuple(tuple)
        }
        if current.readableBytes > 0 {
            buffers.append(current)
        }
        return buffers
    }
}

extension ByteBuffer {
    @discardableResult
    public mutating func writeFeedbackTuple(_ tuple: FeedbackTuple) -> Int {
        self.writeMultipleIntegers(tuple.timestamp, UInt16(truncatingIfNeeded: tuple.deviceToken.readableBytes))
            + self.writeImmutableBuffer(tuple.deviceToken)
    }
}

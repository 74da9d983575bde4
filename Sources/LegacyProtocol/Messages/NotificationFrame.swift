import NIOCore

/// One notification as a legacy provider sent it, in any of the three formats.
///
/// Command 0, "simple":
/// ```
/// +-----+-----------+--------------+-------------+----------------+
/// | 0   | token len | device token | payload len | payload        |
/// | 1 B | 2 B       | token len B  | 2 B         | payload len B  |
/// +-----+-----------+--------------+-------------+----------------+
/// ```
/// Command 1, "enhanced":
/// ```
/// +-----+------------+--------+-----------+-------+-------------+---------+
/// | 1   | identifier | expiry | token len | token | payload len | payload |
/// | 1 B | 4 B        | 4 B    | 2 B       |       | 2 B         |         |
/// +-----+------------+--------+-----------+-------+-------------+---------+
/// ```
/// Command 2, a frame of items:
/// ```
/// +-----+--------------+------------------------------------------+
/// | 2   | frame length | items: id 1 B, length 2 B, data          |
/// | 1 B | 4 B          | frame length B                           |
/// +-----+--------------+------------------------------------------+
/// item 1 device token, 2 payload, 3 identifier (4 B), 4 expiration (4 B), 5 priority (1 B)
/// ```
/// All integers are big-endian. `deviceToken` and `payload` are slices of the bytes that were
/// read: decoding copies nothing (``withOwnStorage()`` copies them out when the frame is kept
/// beyond the read). An absent token or payload is an empty buffer, because the status for
/// "missing" and for "length 0" is the same.
public struct NotificationFrame: Hashable, Sendable {
    public enum Command: UInt8, Hashable, Sendable, CaseIterable {
        case simple = 0
        case enhanced = 1
        case itemized = 2
    }

    /// The priority reported for commands 0 and 1, and for command 2 without item 5.
    public static let defaultPriority: UInt8 = 10

    public var command: Command
    public var identifier: NotificationIdentifier
    /// UNIX seconds; 0 means "do not store".
    public var expiration: UInt32
    public var priority: UInt8
    public var deviceToken: ByteBuffer
    public var payload: ByteBuffer

    public init(
        command: Command,
        identifier: NotificationIdentifier = .zero,
        expiration: UInt32 = 0,
        priority: UInt8 = NotificationFrame.defaultPriority,
        deviceToken: ByteBuffer,
        payload: ByteBuffer
    ) {
        self.command = command
        self.identifier = identifier
        self.expiration = expiration
        self.priority = priority
        self.deviceToken = deviceToken
        self.payload = payload
    }

    /// The same frame with its token and payload copied into one storage of their own.
    ///
    /// A decoded frame's token and payload are slices of the buffer they were read into, and a
    /// slice keeps the whole buffer alive: a TLS handler's 32 KiB read buffer, for a frame of a
    /// few hundred bytes. While any slice lives, the next read into that buffer copies all of
    /// it first (copy-on-write), and a frame kept until its answer (the bridge keeps each one
    /// in flight) keeps 32 KiB in memory. Copying the frame's own bytes costs one small buffer
    /// and lets the read buffer be reused.
    public func withOwnStorage() -> NotificationFrame {
        let tokenLength = self.deviceToken.readableBytes
        var bytes = ByteBufferAllocator().buffer(capacity: tokenLength + self.payload.readableBytes)
        bytes.writeImmutableBuffer(self.deviceToken)
        bytes.writeImmutableBuffer(self.payload)
        var frame = self
        frame.deviceToken = bytes.readSlice(length: tokenLength)!
        frame.payload = bytes
        return frame
    }
}

extension ByteBuffer {
    /// Encodes a frame in its own command's format. The identifier, expiration and priority are
    /// left out where the format has no place for them. For command 2 every item is written,
    /// except that an empty token or payload item is left out.
    ///
    /// This is the encoder of the project's own legacy client; the server only decodes frames.
    @discardableResult
    public mutating func writeNotificationFrame(_ frame: NotificationFrame) -> Int {
        let start = self.writerIndex
        let tokenLength = UInt16(truncatingIfNeeded: frame.deviceToken.readableBytes)
        let payloadLength = UInt16(truncatingIfNeeded: frame.payload.readableBytes)
        switch frame.command {
        case .simple:
            self.writeInteger(NotificationFrame.Command.simple.rawValue)
            self.writeInteger(tokenLength)
            self.writeImmutableBuffer(frame.deviceToken)
            self.writeInteger(payloadLength)
            self.writeImmutableBuffer(frame.payload)
        case .enhanced:
            self.writeMultipleIntegers(
                NotificationFrame.Command.enhanced.rawValue,
                frame.identifier.rawValue,
                frame.expiration,
                tokenLength
            )
            self.writeImmutableBuffer(frame.deviceToken)
            self.writeInteger(payloadLength)
            self.writeImmutableBuffer(frame.payload)
        case .itemized:
            self.writeInteger(NotificationFrame.Command.itemized.rawValue)
            let lengthIndex = self.writerIndex
            self.writeInteger(UInt32(0))
            if frame.deviceToken.readableBytes > 0 {
                self.writeMultipleIntegers(NotificationItemID.deviceToken, tokenLength)
                self.writeImmutableBuffer(frame.deviceToken)
            }
            if frame.payload.readableBytes > 0 {
                self.writeMultipleIntegers(NotificationItemID.payload, payloadLength)
                self.writeImmutableBuffer(frame.payload)
            }
            self.writeMultipleIntegers(
                NotificationItemID.identifier,
                UInt16(4),
                frame.identifier.rawValue,
                NotificationItemID.expiration,
                UInt16(4),
                frame.expiration,
                NotificationItemID.priority,
                UInt16(1),
                frame.priority
            )
            self.setInteger(UInt32(self.writerIndex - lengthIndex - 4), at: lengthIndex)
        }
        return self.writerIndex - start
    }
}

extension NotificationFrame {
    /// The local checks of docs/protocol.md#status-codes, in the order listed there: token, topic,
    /// payload. Returns `nil` for a frame that may be forwarded.
    ///
    /// - Parameters:
    ///   - hasTopic: whether a topic could be resolved for the connection's tenant.
    ///   - maximumPayloadLength: 4096, or 5120 for a VoIP topic.
    public func validationFailure(hasTopic: Bool, maximumPayloadLength: Int) -> ErrorResponseStatus? {
        let tokenLength = self.deviceToken.readableBytes
        if tokenLength == 0 {
            return .missingDeviceToken
        }
        if tokenLength < LegacyProtocolLimits.minimumTokenLength
            || tokenLength > LegacyProtocolLimits.maximumTokenLength
        {
            return .invalidTokenSize
        }
        if !hasTopic {
            return .missingTopic
        }
        let payloadLength = self.payload.readableBytes
        if payloadLength == 0 {
            return .missingPayload
        }
        if payloadLength > maximumPayloadLength {
            return .invalidPayloadSize
        }
        return nil
    }
}

/// The 4 opaque identifier bytes of an enhanced (command 1) or itemized (command 2) notification.
///
/// Identifiers are echoed back verbatim in error-response packets: some clients write them in
/// host byte order, so the bridge never interprets them. They are not unique either (0 is common,
/// and counters restart on every connection). The bytes are kept as they were read, big-endian,
/// in ``rawValue`` and written back the same way.
public struct NotificationIdentifier: Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt32

    public init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    /// What is reported when a frame carries no identifier (command 0, or command 2 without
    /// item 3) or when it could not be read.
    public static let zero = NotificationIdentifier(rawValue: 0)

    public var description: String {
        let hex = String(self.rawValue, radix: 16)
        return String(repeating: "0", count: 8 - hex.count) + hex
    }
}

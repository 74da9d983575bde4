import NIOCore

/// Decodes notification frames of commands 0, 1 and 2.
///
/// The decoder never consumes a partial frame: it looks at the header with `get…` calls and only
/// moves the reader index once the whole frame is readable. Every length it reads is compared
/// with a limit of ``LegacyProtocolLimits`` before it waits for the bytes the length announces,
/// so a hostile length is refused on the header alone and nothing proportional to it is
/// allocated.
///
/// The decoder checks structure only (the protocol errors of docs/protocol.md#status-codes, and token lengths that
/// are too long to wait for). What depends on the tenant (topic, payload limit) and the
/// "missing" statuses are checked by ``NotificationFrame/validationFailure(hasTopic:maximumPayloadLength:)``.
///
/// After it throws, the stream is corrupt and the caller must stop decoding.
public struct NotificationFrameDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = NotificationFrame

    public init() {}

    public mutating func decode(buffer: inout ByteBuffer) throws -> NotificationFrame? {
        guard let commandByte = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else {
            return nil
        }
        switch commandByte {
        case NotificationFrame.Command.simple.rawValue:
            return try Self.decodeSimple(&buffer)
        case NotificationFrame.Command.enhanced.rawValue:
            return try Self.decodeEnhanced(&buffer)
        case NotificationFrame.Command.itemized.rawValue:
            return try Self.decodeItemized(&buffer)
        default:
            throw LegacyProtocolError.unknownCommand(commandByte)
        }
    }

    /// At the end of the stream a partial frame is left in `buffer` (the caller logs it); nothing
    /// is made up from it.
    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> NotificationFrame? {
        try self.decode(buffer: &buffer)
    }

    // MARK: command 0

    private static func decodeSimple(_ buffer: inout ByteBuffer) throws -> NotificationFrame? {
        // 0 | token length (2)
        guard let tokenLength = buffer.getInteger(at: buffer.readerIndex + 1, as: UInt16.self) else { return nil }
        guard tokenLength <= LegacyProtocolLimits.maximumTokenLength else {
            throw LegacyProtocolError.tokenTooLong(tokenLength, identifier: .zero, command: .simple)
        }
        guard
            let (token, payload) = try Self.readTokenAndPayload(
                &buffer,
                headerLength: 3,
                tokenLength: tokenLength,
                identifier: .zero,
                command: .simple
            )
        else {
            return nil
        }
        return NotificationFrame(command: .simple, deviceToken: token, payload: payload)
    }

    // MARK: command 1

    private static func decodeEnhanced(_ buffer: inout ByteBuffer) throws -> NotificationFrame? {
        // 1 | identifier (4) | expiry (4) | token length (2)
        guard
            let (_, identifierBytes, expiration, tokenLength) = buffer.getMultipleIntegers(
                at: buffer.readerIndex,
                as: (UInt8, UInt32, UInt32, UInt16).self
            )
        else { return nil }
        let identifier = NotificationIdentifier(rawValue: identifierBytes)
        guard tokenLength <= LegacyProtocolLimits.maximumTokenLength else {
            throw LegacyProtocolError.tokenTooLong(tokenLength, identifier: identifier, command: .enhanced)
        }
        guard
            let (token, payload) = try Self.readTokenAndPayload(
                &buffer,
                headerLength: 11,
                tokenLength: tokenLength,
                identifier: identifier,
                command: .enhanced
            )
        else {
            return nil
        }
        return NotificationFrame(
            command: .enhanced,
            identifier: identifier,
            expiration: expiration,
            deviceToken: token,
            payload: payload
        )
    }

    /// Commands 0 and 1 end alike: the token (its length already checked), a 2-byte payload
    /// length and the payload. Consumes the whole frame, or nothing when it is not all here.
    ///
    /// A payload length over the largest payload any topic accepts is answered on the length
    /// field alone (status 7, or the token's status when its length is already wrong: the
    /// order of the local checks), not after waiting for up to 64 KiB that cannot be valid.
    /// ApnsPHP, given a 33-byte token, packs its length as 32: the last token byte becomes the
    /// payload length's high byte, and its batch ends long before 25,600 bytes.
    private static func readTokenAndPayload(
        _ buffer: inout ByteBuffer,
        headerLength: Int,
        tokenLength: UInt16,
        identifier: NotificationIdentifier,
        command: NotificationFrame.Command
    ) throws -> (token: ByteBuffer, payload: ByteBuffer)? {
        let start = buffer.readerIndex
        let payloadLengthIndex = start + headerLength + Int(tokenLength)
        guard let payloadLength = buffer.getInteger(at: payloadLengthIndex, as: UInt16.self) else { return nil }
        guard payloadLength <= LegacyProtocolLimits.largestAcceptedPayloadLength else {
            throw LegacyProtocolError.payloadTooLong(
                payloadLength,
                tokenLength: tokenLength,
                identifier: identifier,
                command: command
            )
        }
        let frameLength = headerLength + Int(tokenLength) + 2 + Int(payloadLength)
        guard buffer.readableBytes >= frameLength else { return nil }
        let token = buffer.getSlice(at: start + headerLength, length: Int(tokenLength))!
        let payload = buffer.getSlice(at: payloadLengthIndex + 2, length: Int(payloadLength))!
        buffer.moveReaderIndex(forwardBy: frameLength)
        return (token, payload)
    }

    // MARK: command 2

    private static func decodeItemized(_ buffer: inout ByteBuffer) throws -> NotificationFrame? {
        let start = buffer.readerIndex
        // 2 | frame length (4)
        guard let frameLength = buffer.getInteger(at: start + 1, as: UInt32.self) else { return nil }
        guard frameLength <= LegacyProtocolLimits.maximumFrameLength else {
            throw LegacyProtocolError.frameTooLong(frameLength)
        }
        guard buffer.readableBytes >= 5 + Int(frameLength) else { return nil }

        let frame = try Self.parseItems(in: buffer, from: start + 5, to: start + 5 + Int(frameLength))
        buffer.moveReaderIndex(forwardBy: 5 + Int(frameLength))
        return frame
    }

    /// Parses the items between `start` and `end`, which are readable.
    ///
    /// An item with a bad id, length or value does not stop the scan, because the item
    /// boundaries are still known: the identifier may follow, and it is reported with the error.
    /// An item running past the frame ends the scan: nothing after it can be trusted.
    ///
    /// The scan reads the items' bytes in place and notes where the token and the payload are;
    /// the frame gets its two slices of `buffer` at the end (no copy, no allocation).
    private static func parseItems(in buffer: ByteBuffer, from start: Int, to end: Int) throws -> NotificationFrame {
        var scan = ItemScan()
        try buffer.withUnsafeReadableBytes { bytes in
            // `bytes` starts at the reader index; item offsets below are relative to it.
            let base = buffer.readerIndex
            try scan.scan(bytes, from: start - base, to: end - base)
        }
        if let firstError = scan.firstError {
            throw firstError.reporting(scan.identifier ?? .zero)
        }
        let base = buffer.readerIndex
        return NotificationFrame(
            command: .itemized,
            identifier: scan.identifier ?? .zero,
            expiration: scan.expiration,
            priority: scan.priority,
            deviceToken: scan.token.map { buffer.getSlice(at: base + $0.offset, length: $0.length)! } ?? ByteBuffer(),
            payload: scan.payload.map { buffer.getSlice(at: base + $0.offset, length: $0.length)! } ?? ByteBuffer()
        )
    }
}

/// What a scan of command-2 items found: plain values, and where the token and payload are.
private struct ItemScan {
    var token: (offset: Int, length: Int)?
    var payload: (offset: Int, length: Int)?
    var identifier: NotificationIdentifier?
    var expiration: UInt32 = 0
    var priority: UInt8 = NotificationFrame.defaultPriority
    var firstError: LegacyProtocolError?

    mutating func scan(_ bytes: UnsafeRawBufferPointer, from start: Int, to end: Int) throws {
        var seen: UInt8 = 0  // bit n set: item n seen
        var index = start
        while index < end {
            guard index + 3 <= end else {
                throw (self.firstError ?? .truncatedItemHeader()).reporting(self.identifier ?? .zero)
            }
            let itemID = bytes[index]
            let itemLength = UInt16(bytes[index + 1]) << 8 | UInt16(bytes[index + 2])
            let dataIndex = index + 3
            guard dataIndex + Int(itemLength) <= end else {
                throw (self.firstError ?? .itemRunsPastFrame(itemID: itemID, length: itemLength))
                    .reporting(self.identifier ?? .zero)
            }
            index = dataIndex + Int(itemLength)
            if self.firstError != nil && itemID != NotificationItemID.identifier {
                continue
            }

            if itemID >= 1 && itemID <= 5 {
                let bit: UInt8 = 1 << itemID
                if seen & bit != 0 {
                    self.firstError = self.firstError ?? .duplicateItem(itemID)
                    continue
                }
                seen |= bit
            }

            switch itemID {
            case NotificationItemID.deviceToken:
                self.token = (dataIndex, Int(itemLength))
            case NotificationItemID.payload:
                self.payload = (dataIndex, Int(itemLength))
            case NotificationItemID.identifier:
                guard itemLength == 4 else {
                    self.firstError = self.firstError ?? .badItemLength(itemID: itemID, length: itemLength)
                    continue
                }
                self.identifier = NotificationIdentifier(rawValue: Self.uint32(bytes, at: dataIndex))
            case NotificationItemID.expiration:
                guard itemLength == 4 else {
                    self.firstError = self.firstError ?? .badItemLength(itemID: itemID, length: itemLength)
                    continue
                }
                self.expiration = Self.uint32(bytes, at: dataIndex)
            case NotificationItemID.priority:
                guard itemLength == 1 else {
                    self.firstError = self.firstError ?? .badItemLength(itemID: itemID, length: itemLength)
                    continue
                }
                let priority = bytes[dataIndex]
                guard priority == 10 || priority == 5 || priority == 1 else {
                    self.firstError = self.firstError ?? .badPriority(priority)
                    continue
                }
                self.priority = priority
            default:
                self.firstError = self.firstError ?? .unknownItem(itemID)
            }
        }
    }

    /// A big-endian UInt32 at `index` (in bounds: checked by the caller).
    private static func uint32(_ bytes: UnsafeRawBufferPointer, at index: Int) -> UInt32 {
        UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt32.self))
    }
}

import NIOCore

/// Decodes feedback tuples (the project's own feedback client and tests read them with it).
public struct FeedbackTupleDecoder: NIOSingleStepByteToMessageDecoder {
    public typealias InboundOut = FeedbackTuple

    /// Tokens longer than this are refused before their bytes are waited for.
    public var maximumTokenLength: Int

    public init(maximumTokenLength: Int = LegacyProtocolLimits.maximumTokenLength) {
        self.maximumTokenLength = maximumTokenLength
    }

    public struct TokenTooLong: Error, Hashable {
        public var length: Int
    }

    public mutating func decode(buffer: inout ByteBuffer) throws -> FeedbackTuple? {
        guard
            let (timestamp, tokenLength) = buffer.getMultipleIntegers(at: buffer.readerIndex, as: (UInt32, UInt16).self)
        else {
            return nil
        }
        guard tokenLength <= self.maximumTokenLength else {
            throw TokenTooLong(length: Int(tokenLength))
        }
        guard buffer.readableBytes >= 6 + Int(tokenLength) else { return nil }
        buffer.moveReaderIndex(forwardBy: 6)
        return FeedbackTuple(timestamp: timestamp, deviceToken: buffer.readSlice(length: Int(tokenLength))!)
    }

    public mutating func decodeLast(buffer: inout ByteBuffer, seenEOF: Bool) throws -> FeedbackTuple? {
        try self.decode(buffer: &buffer)
    }
}

import LegacyProtocol
import NIOCore
import NIOTestUtils
import Testing

@Suite("Notification frame decoder")
struct NotificationFrameDecoderTests {
    static func token(_ seed: Int, length: Int = 32) -> ByteBuffer {
        ByteBuffer(bytes: (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ seed) })
    }

    static func frame(_ index: Int) -> NotificationFrame {
        let command = NotificationFrame.Command.allCases[index % 3]
        var frame = NotificationFrame(
            command: command,
            deviceToken: token(index, length: 32 + index % 69),
            payload: ByteBuffer(string: #"{"aps":{"alert":"n\#(index)"}}"#)
        )
        if command != .simple {
            frame.identifier = NotificationIdentifier(rawValue: UInt32(truncatingIfNeeded: index &* 2_654_435_761))
            frame.expiration = UInt32(index)
        }
        if command == .itemized {
            frame.priority = [10, 5, 1][index % 3]
        }
        return frame
    }

    /// Decodes chunk by chunk as the gateway does: append, decode what is whole, keep the rest.
    static func decodeAll(_ chunks: [ByteBuffer], expectingLeftover: Bool = false) throws -> [NotificationFrame] {
        var decoder = NotificationFrameDecoder()
        var buffer = ByteBuffer()
        var frames: [NotificationFrame] = []
        for var chunk in chunks {
            buffer.writeBuffer(&chunk)
            while let frame = try decoder.decode(buffer: &buffer) {
                frames.append(frame)
            }
            buffer.discardReadBytes()
        }
        #expect((buffer.readableBytes > 0) == expectingLeftover)
        return frames
    }

    @Test("10,000 pipelined frames of all three commands decode the same whole and split at random boundaries")
    func randomSplits() throws {
        let frames = (0..<10_000).map(Self.frame)
        var stream = ByteBuffer()
        for frame in frames { stream.writeNotificationFrame(frame) }

        let whole = try Self.decodeAll([stream])
        #expect(whole == frames)

        var generator = SplitMix64(seed: 0x5EED)
        for _ in 0..<5 {
            var chunks: [ByteBuffer] = []
            var rest = stream
            while rest.readableBytes > 0 {
                let size = min(rest.readableBytes, Int(generator.next() % 300) + 1)
                chunks.append(rest.readSlice(length: size)!)
            }
            #expect(try Self.decodeAll(chunks) == frames)
        }
        // One byte at a time.
        var bytewise: [ByteBuffer] = []
        var rest = stream.getSlice(at: 0, length: 20_000)!
        while let byte = rest.readSlice(length: 1) { bytewise.append(byte) }
        let decodedBytewise = try Self.decodeAll(bytewise, expectingLeftover: true)
        #expect(decodedBytewise == Array(frames.prefix(decodedBytewise.count)))
        #expect(decodedBytewise.count > 100)
    }

    @Test("ByteToMessageDecoderVerifier accepts the decoder")
    func verifier() throws {
        let pairs: [(ByteBuffer, [NotificationFrame])] = (0..<30).map { index in
            var buffer = ByteBuffer()
            buffer.writeNotificationFrame(Self.frame(index))
            return (buffer, [Self.frame(index)])
        }
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: pairs) { NotificationFrameDecoder() }
    }

    @Test("Identifier bytes are kept verbatim", arguments: [UInt32(0), 1, 0x0100_0000, 0xDEAD_BEEF])
    func identifierVerbatim(identifier: UInt32) throws {
        var buffer = ByteBuffer(bytes: [1])
        buffer.writeInteger(identifier, endianness: .little)  // a client writing host byte order
        buffer.writeInteger(UInt32(0))
        buffer.writeInteger(UInt16(32))
        buffer.writeImmutableBuffer(Self.token(1))
        buffer.writeInteger(UInt16(2))
        buffer.writeString("{}")
        var decoder = NotificationFrameDecoder()
        let frame = try #require(try decoder.decode(buffer: &buffer))
        var echoed = ByteBuffer()
        echoed.writeErrorResponse(ErrorResponsePacket(status: .invalidToken, identifier: frame.identifier))
        #expect(echoed.getBytes(at: 2, length: 4) == withUnsafeBytes(of: identifier.littleEndian) { Array($0) })
    }

    @Test("Missing optional items take their defaults")
    func defaults() throws {
        var buffer = ByteBuffer(bytes: [2, 0, 0, 0, 40, 1, 0, 32])
        buffer.writeImmutableBuffer(Self.token(1))
        buffer.writeBytes([2, 0, 2])
        buffer.writeString("{}")
        var decoder = NotificationFrameDecoder()
        let frame = try #require(try decoder.decode(buffer: &buffer))
        #expect(frame.identifier == .zero)
        #expect(frame.expiration == 0)
        #expect(frame.priority == 10)
    }

    struct Hostile: Sendable, CustomTestStringConvertible {
        var name: String
        var header: [UInt8]
        var status: ErrorResponseStatus
        var identifier: UInt32
        var testDescription: String { self.name }
    }

    @Test(
        "Hostile lengths are refused on the header alone",
        arguments: [
            Hostile(
                name: "frame length 0xFFFFFFFF",
                header: [2, 0xFF, 0xFF, 0xFF, 0xFF],
                status: .protocolError,
                identifier: 0
            ),
            Hostile(name: "frame length 2^31", header: [2, 0x80, 0, 0, 0], status: .protocolError, identifier: 0),
            Hostile(
                name: "command 1 token length 0xFFFF",
                header: [1, 0, 0, 0, 9, 0, 0, 0, 0, 0xFF, 0xFF],
                status: .invalidTokenSize,
                identifier: 9
            ),
            Hostile(
                name: "command 0 token length 0xFFFF",
                header: [0, 0xFF, 0xFF],
                status: .invalidTokenSize,
                identifier: 0
            ),
            Hostile(name: "unknown command", header: [0x16], status: .protocolError, identifier: 0),
            Hostile(
                name: "command 1 payload length 25,600",
                header: Self.upToPayloadLength(.enhanced, 0x6400),
                status: .invalidPayloadSize,
                identifier: 9
            ),
            Hostile(
                name: "command 1 payload length 0xFFFF",
                header: Self.upToPayloadLength(.enhanced, 0xFFFF),
                status: .invalidPayloadSize,
                identifier: 9
            ),
            Hostile(
                name: "command 0 payload length 25,600",
                header: Self.upToPayloadLength(.simple, 0x6400),
                status: .invalidPayloadSize,
                identifier: 0
            ),
            Hostile(
                name: "command 1 payload length 0xFFFF after an empty token: the token's status first",
                header: Self.upToPayloadLength(.enhanced, 0xFFFF, tokenLength: 0),
                status: .missingDeviceToken,
                identifier: 9
            ),
            Hostile(
                name: "command 1 payload length 0xFFFF after a 31-byte token: the token's status first",
                header: Self.upToPayloadLength(.enhanced, 0xFFFF, tokenLength: 31),
                status: .invalidTokenSize,
                identifier: 9
            ),
        ]
    )
    func hostileLengths(_ hostile: Hostile) {
        var buffer = ByteBuffer(bytes: hostile.header)
        var decoder = NotificationFrameDecoder()
        #expect {
            _ = try decoder.decode(buffer: &buffer)
        } throws: { error in
            guard let error = error as? LegacyProtocolError else { return false }
            return error.status == hostile.status && error.identifier.rawValue == hostile.identifier
        }
    }

    /// A command-0 or command-1 frame (identifier 9) up to its payload length field.
    static func upToPayloadLength(
        _ command: NotificationFrame.Command,
        _ payloadLength: UInt16,
        tokenLength: Int = 32
    ) -> [UInt8] {
        var bytes = ByteBuffer(integer: command.rawValue)
        if command == .enhanced {
            bytes.writeMultipleIntegers(UInt32(9), UInt32(0))
        }
        bytes.writeInteger(UInt16(tokenLength))
        bytes.writeImmutableBuffer(Self.token(1, length: tokenLength))
        bytes.writeInteger(payloadLength)
        return Array(bytes.readableBytesView)
    }

    @Test(
        "A command-0 or command-1 frame announcing the largest accepted payload waits for it",
        arguments: [NotificationFrame.Command.simple, .enhanced]
    )
    func largestAcceptedPayloadWaits(_ command: NotificationFrame.Command) throws {
        var buffer = ByteBuffer(
            bytes: Self.upToPayloadLength(command, UInt16(LegacyProtocolLimits.largestAcceptedPayloadLength))
        )
        var decoder = NotificationFrameDecoder()
        #expect(try decoder.decode(buffer: &buffer) == nil)
        buffer.writeRepeatingByte(0x7B, count: LegacyProtocolLimits.largestAcceptedPayloadLength)
        #expect(
            try decoder.decode(buffer: &buffer)?.payload.readableBytes
                == LegacyProtocolLimits.largestAcceptedPayloadLength
        )
    }

    @Test("An item length of 0xFFFF inside a small frame is a protocol error once the frame is read")
    func itemLengthPastFrame() {
        var buffer = ByteBuffer(bytes: [2, 0, 0, 0, 13, 3, 0, 4, 0, 0, 0, 5, 2, 0xFF, 0xFF, 1, 2, 3])
        var decoder = NotificationFrameDecoder()
        #expect(throws: LegacyProtocolError.self) { _ = try decoder.decode(buffer: &buffer) }
    }

    @Test("A partial frame is never consumed", arguments: [1, 3, 5, 10, 40, 76])
    func partialFrame(length: Int) throws {
        var whole = ByteBuffer()
        whole.writeNotificationFrame(Self.frame(2))
        var partial = whole.getSlice(at: 0, length: min(length, whole.readableBytes - 1))!
        let before = partial
        var decoder = NotificationFrameDecoder()
        #expect(try decoder.decode(buffer: &partial) == nil)
        #expect(partial == before)
        #expect(try decoder.decodeLast(buffer: &partial, seenEOF: true) == nil)
    }
}

@Suite("Error-response and feedback codecs")
struct SmallCodecTests {
    @Test("Error-response round trip")
    func errorResponse() {
        var buffer = ByteBuffer()
        buffer.writeErrorResponse(
            ErrorResponsePacket(status: .shutdown, identifier: NotificationIdentifier(rawValue: 0x0102_0304))
        )
        #expect(Array(buffer.readableBytesView) == [8, 10, 1, 2, 3, 4])
        #expect(
            buffer.readErrorResponse()
                == ErrorResponsePacket(status: .shutdown, identifier: NotificationIdentifier(rawValue: 0x0102_0304))
        )
    }

    @Test("Feedback tuples round trip, split anywhere")
    func feedbackTuples() throws {
        let tuples = (0..<40).map {
            FeedbackTuple(
                timestamp: UInt32(1_700_000_000 + $0),
                deviceToken: NotificationFrameDecoderTests.token($0, length: 32 + $0 % 69)
            )
        }
        var stream = ByteBuffer()
        for tuple in tuples { stream.writeFeedbackTuple(tuple) }
        #expect(stream.getBytes(at: 0, length: 6) == [0x65, 0x53, 0xF1, 0x00, 0, 32])
        let pairs = tuples.map { tuple -> (ByteBuffer, [FeedbackTuple]) in
            var buffer = ByteBuffer()
            buffer.writeFeedbackTuple(tuple)
            return (buffer, [tuple])
        }
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: pairs) { FeedbackTupleDecoder() }
    }

    @Test("Feedback tuples are cut into record-sized buffers of whole tuples", arguments: [0, 1, 431, 432, 1000])
    func recordSizedFeedback(count: Int) {
        let tuples = (0..<count).map {
            FeedbackTuple(timestamp: UInt32($0), deviceToken: NotificationFrameDecoderTests.token($0))
        }
        let buffers = FeedbackTuple.recordSizedBuffers(tuples, allocator: ByteBufferAllocator())
        #expect(
            buffers.map(\.readableBytes).allSatisfy {
                $0 <= FeedbackTuple.maximumRecordPlaintext && $0 % 38 == 0 && $0 > 0
            }
        )
        #expect(buffers.count == (count + 430) / 431, "431 tuples of 38 bytes fill a record")
        var joined = ByteBuffer()
        for buffer in buffers { joined.writeImmutableBuffer(buffer) }
        var expected = ByteBuffer()
        for tuple in tuples { expected.writeFeedbackTuple(tuple) }
        #expect(joined == expected)
    }

    @Test("Record-sized feedback buffers hold whole tuples of mixed token lengths")
    func recordSizedMixedFeedback() {
        let tuples = (0..<500).map {
            FeedbackTuple(
                timestamp: UInt32($0),
                deviceToken: NotificationFrameDecoderTests.token($0, length: 32 + $0 % 69)
            )
        }
        var decoder = FeedbackTupleDecoder()
        var decoded: [FeedbackTuple] = []
        for var buffer in FeedbackTuple.recordSizedBuffers(tuples, allocator: ByteBufferAllocator()) {
            #expect(buffer.readableBytes <= FeedbackTuple.maximumRecordPlaintext)
            while let tuple = try? decoder.decode(buffer: &buffer) { decoded.append(tuple) }
            #expect(buffer.readableBytes == 0, "a buffer ends on a tuple boundary")
        }
        #expect(decoded == tuples)
    }

    @Test("A feedback tuple with a hostile token length is refused before its bytes arrive")
    func hostileFeedbackLength() {
        var buffer = ByteBuffer(bytes: [0, 0, 0, 1, 0xFF, 0xFF])
        var decoder = FeedbackTupleDecoder()
        #expect(throws: FeedbackTupleDecoder.TokenTooLong.self) { _ = try decoder.decode(buffer: &buffer) }
    }
}

/// A small deterministic generator, so that a failing split can be reproduced.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { self.state = seed }
    mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

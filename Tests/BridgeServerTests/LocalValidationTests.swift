import BridgeCore
import BridgeServer
import BridgeTestSupport
import DevelopmentPKI
import LegacyClient
import LegacyProtocol
import NIOCore
import Testing

/// docs/protocol.md#status-codes over real TLS on loopback: each malformed or invalid frame gets its status
/// (or, for command 0, a plain close), the connection closes, and the next client is served.
@Suite("Local validation over TLS")
struct LocalValidationTests {
    enum Expected: Sendable, CustomStringConvertible {
        case packet(ErrorResponseStatus, identifier: UInt32)
        case plainClose

        var description: String {
            switch self {
            case .packet(let status, let identifier): "08 \(status) \(identifier)"
            case .plainClose: "close without a packet"
            }
        }
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var bundleID: String? = "com.example.app"
        var bytes: ByteBuffer
        var expected: Expected
        var testDescription: String { self.name }
    }

    static let token = FrameBuilder.token(1)
    static let payload = FrameBuilder.payload()

    static let cases: [Case] = [
        Case(
            name: "token item missing: status 2",
            bytes: FrameBuilder.itemized([FrameBuilder.item(2, payload), FrameBuilder.item(3, integer: 7)]),
            expected: .packet(.missingDeviceToken, identifier: 7)
        ),
        Case(
            name: "token length 0 (command 1): status 2",
            bytes: FrameBuilder.frame(.enhanced, identifier: 7, token: ByteBuffer(), payload: payload),
            expected: .packet(.missingDeviceToken, identifier: 7)
        ),
        Case(
            name: "token of 31 bytes: status 5",
            bytes: FrameBuilder.frame(
                .itemized,
                identifier: 7,
                token: FrameBuilder.token(1, length: 31),
                payload: payload
            ),
            expected: .packet(.invalidTokenSize, identifier: 7)
        ),
        Case(
            name: "token of 101 bytes: status 5",
            bytes: FrameBuilder.frame(
                .itemized,
                identifier: 7,
                token: FrameBuilder.token(1, length: 101),
                payload: payload
            ),
            expected: .packet(.invalidTokenSize, identifier: 7)
        ),
        Case(
            name: "token of 101 bytes (command 1): status 5",
            bytes: FrameBuilder.frame(
                .enhanced,
                identifier: 7,
                token: FrameBuilder.token(1, length: 101),
                payload: payload
            ),
            expected: .packet(.invalidTokenSize, identifier: 7)
        ),
        Case(
            name: "hostile token length 0xFFFF (command 1, header only): status 5 at once",
            bytes: ByteBuffer(bytes: [1, 0, 0, 0, 7, 0, 0, 0, 0, 0xFF, 0xFF]),
            expected: .packet(.invalidTokenSize, identifier: 7)
        ),
        Case(
            name: "no topic for the tenant: status 3",
            bundleID: nil,
            bytes: FrameBuilder.frame(.itemized, identifier: 7, token: token, payload: payload),
            expected: .packet(.missingTopic, identifier: 7)
        ),
        Case(
            name: "payload item missing: status 4",
            bytes: FrameBuilder.itemized([FrameBuilder.item(1, token), FrameBuilder.item(3, integer: 7)]),
            expected: .packet(.missingPayload, identifier: 7)
        ),
        Case(
            name: "empty payload (command 1): status 4",
            bytes: FrameBuilder.frame(.enhanced, identifier: 7, token: token, payload: ByteBuffer()),
            expected: .packet(.missingPayload, identifier: 7)
        ),
        Case(
            name: "payload of 4097 bytes: status 7",
            bytes: FrameBuilder.frame(
                .itemized,
                identifier: 7,
                token: token,
                payload: FrameBuilder.payload(length: 4097)
            ),
            expected: .packet(.invalidPayloadSize, identifier: 7)
        ),
        Case(
            name: "payload of 5121 bytes for a VoIP topic: status 7",
            bundleID: "com.example.app.voip",
            bytes: FrameBuilder.frame(
                .itemized,
                identifier: 7,
                token: token,
                payload: FrameBuilder.payload(length: 5121)
            ),
            expected: .packet(.invalidPayloadSize, identifier: 7)
        ),
        Case(
            name: "payload item of 65535 bytes: status 7, not a protocol error",
            bytes: FrameBuilder.frame(
                .itemized,
                identifier: 7,
                token: token,
                payload: FrameBuilder.payload(length: 65535)
            ),
            expected: .packet(.invalidPayloadSize, identifier: 7)
        ),
        Case(
            name: "identifier item of 3 bytes: status 128, identifier 0",
            bytes: FrameBuilder.itemized([
                FrameBuilder.item(1, token), FrameBuilder.item(2, payload),
                FrameBuilder.item(3, ByteBuffer(bytes: [0, 0, 7])),
            ]),
            expected: .packet(.protocolError, identifier: 0)
        ),
        Case(
            name: "expiration item of 5 bytes: status 128",
            bytes: FrameBuilder.itemized([
                FrameBuilder.item(1, token), FrameBuilder.item(2, payload), FrameBuilder.item(3, integer: 7),
                FrameBuilder.item(4, ByteBuffer(bytes: [0, 0, 0, 0, 0])),
            ]),
            expected: .packet(.protocolError, identifier: 7)
        ),
        Case(
            name: "priority item of 2 bytes: status 128",
            bytes: FrameBuilder.itemized([
                FrameBuilder.item(1, token), FrameBuilder.item(2, payload),
                FrameBuilder.item(5, ByteBuffer(bytes: [0, 10])),
                FrameBuilder.item(3, integer: 7),
            ]),
            expected: .packet(.protocolError, identifier: 7)
        ),
        Case(
            name: "priority 7: status 128",
            bytes: FrameBuilder.itemized([
                FrameBuilder.item(3, integer: 7), FrameBuilder.item(1, token), FrameBuilder.item(2, payload),
                FrameBuilder.item(5, ByteBuffer(bytes: [7])),
            ]),
            expected: .packet(.protocolError, identifier: 7)
        ),
        Case(
            name: "unknown item id 9: status 128",
            bytes: FrameBuilder.itemized([
                FrameBuilder.item(1, token), FrameBuilder.item(2, payload),
                FrameBuilder.item(9, ByteBuffer(bytes: [1])),
                FrameBuilder.item(3, integer: 7),
            ]),
            expected: .packet(.protocolError, identifier: 7)
        ),
        Case(
            name: "hostile frame length 0xFFFFFFFF (header only): status 128 at once",
            bytes: ByteBuffer(bytes: [2, 0xFF, 0xFF, 0xFF, 0xFF]),
            expected: .packet(.protocolError, identifier: 0)
        ),
        Case(
            name: "frame length one over the limit (header only): status 128 at once",
            bytes: {
                var buffer = ByteBuffer(integer: UInt8(2))
                buffer.writeInteger(UInt32(LegacyProtocolLimits.maximumFrameLength + 1))
                return buffer
            }(),
            expected: .packet(.protocolError, identifier: 0)
        ),
        Case(
            name: "hostile item length 0xFFFF running past its frame: status 128 at once",
            bytes: FrameBuilder.itemized(
                [FrameBuilder.item(3, integer: 7), FrameBuilder.item(2, ByteBuffer(bytes: [1, 2, 3]), length: 0xFFFF)]
            ),
            expected: .packet(.protocolError, identifier: 7)
        ),
        Case(
            name: "item header cut off by the end of its frame: status 128",
            bytes: FrameBuilder.itemized([FrameBuilder.item(1, token), ByteBuffer(bytes: [2, 0])]),
            expected: .packet(.protocolError, identifier: 0)
        ),
        Case(
            name: "unknown command 7: status 128, identifier 0",
            bytes: ByteBuffer(bytes: [7, 0, 0, 0, 0, 0, 0]),
            expected: .packet(.protocolError, identifier: 0)
        ),
        Case(
            name: "command 0 with a 31-byte token: closed without a packet",
            bytes: FrameBuilder.frame(.simple, token: FrameBuilder.token(1, length: 31), payload: payload),
            expected: .plainClose
        ),
        Case(
            name: "command 0, hostile token length 0xFFFF (header only): closed at once without a packet",
            bytes: ByteBuffer(bytes: [0, 0xFF, 0xFF]),
            expected: .plainClose
        ),
        Case(
            name: "command 1 announcing a 25,600-byte payload (ApnsPHP's 33-byte token), header only: status 7 at once",
            bytes: headerOnly(.enhanced, payloadLength: 25_600),
            expected: .packet(.invalidPayloadSize, identifier: 7)
        ),
        Case(
            name: "command 1 announcing a 65,535-byte payload, header only: status 7 at once",
            bytes: headerOnly(.enhanced, payloadLength: 65_535),
            expected: .packet(.invalidPayloadSize, identifier: 7)
        ),
        Case(
            name: "command 0 announcing a 25,600-byte payload, header only: closed at once without a packet",
            bytes: headerOnly(.simple, payloadLength: 25_600),
            expected: .plainClose
        ),
        Case(
            name: "command 0 announcing a 65,535-byte payload, header only: closed at once without a packet",
            bytes: headerOnly(.simple, payloadLength: 65_535),
            expected: .plainClose
        ),
    ]

    /// A command-0 or command-1 frame up to its payload length field (identifier 7, a 32-byte
    /// token), none of the payload it announces: the bridge must answer without waiting for it.
    static func headerOnly(_ command: NotificationFrame.Command, payloadLength: UInt16) -> ByteBuffer {
        var bytes = ByteBuffer(integer: command.rawValue)
        if command == .enhanced {
            bytes.writeMultipleIntegers(UInt32(7), UInt32(0))
        }
        bytes.writeInteger(UInt16(token.readableBytes))
        bytes.writeImmutableBuffer(token)
        bytes.writeInteger(payloadLength)
        return bytes
    }

    @Test("Bad frame gets its status, the connection closes, the next client is served", arguments: cases)
    func badFrame(_ testCase: Case) async throws {
        try await withResource(try await GatewayHarness.start()) { harness in

            // A good notification first: it is forwarded, and the bad one after it is reported.
            let client = try await harness.connect(bundleID: testCase.bundleID)
            var bytes =
                testCase.bundleID == nil
                ? ByteBuffer() : FrameBuilder.frame(.itemized, identifier: 1, token: Self.token, payload: Self.payload)
            bytes.writeImmutableBuffer(testCase.bytes)
            try await client.send(bytes)
            let received = try await client.bytesUntilClose()

            switch testCase.expected {
            case .packet(let status, let identifier):
                var expected = ByteBuffer()
                expected.writeErrorResponse(
                    ErrorResponsePacket(status: status, identifier: NotificationIdentifier(rawValue: identifier))
                )
                #expect(received == expected)
            case .plainClose:
                #expect(received.readableBytes == 0)
            }
            let forwarded = harness.forwarder.ledger.map(\.frame.identifier.rawValue)
            #expect(forwarded == (testCase.bundleID == nil ? [] : [1]))

            // The server keeps serving everyone else.
            let next = try await harness.connect()
            try await next.send(FrameBuilder.frame(.itemized, identifier: 2, token: Self.token, payload: Self.payload))
            try await harness.forwarder.waitForLedgerCount(forwarded.count + 1, on: next.channel.eventLoop)
            #expect(harness.forwarder.ledger.last?.frame.identifier.rawValue == 2)
            #expect(next.isActive)
            await next.close()
        }
    }

    @Test("A VoIP topic accepts a 5120-byte payload")
    func voipPayloadLimit() async throws {
        try await withResource(try await GatewayHarness.start()) { harness in
            let client = try await harness.connect(bundleID: "com.example.app.voip")
            try await client.send(
                FrameBuilder.frame(
                    .itemized,
                    identifier: 3,
                    token: Self.token,
                    payload: FrameBuilder.payload(length: 5120)
                )
            )
            try await harness.forwarder.waitForLedgerCount(1, on: client.channel.eventLoop)
            #expect(harness.forwarder.ledger[0].frame.payload.readableBytes == 5120)
            #expect(harness.forwarder.ledger[0].tenant.topic == "com.example.app.voip")
            await client.close()
        }
    }

    @Test("A frame cut off by the end of the connection is not forwarded")
    func truncatedFrameAtClose() async throws {
        try await withResource(try await GatewayHarness.start()) { harness in
            let client = try await harness.connect()
            var bytes = FrameBuilder.frame(.enhanced, identifier: 1, token: Self.token, payload: Self.payload)
            let whole = FrameBuilder.frame(.enhanced, identifier: 2, token: Self.token, payload: Self.payload)
            bytes.writeImmutableBuffer(whole.getSlice(at: 0, length: whole.readableBytes - 3)!)
            try await client.send(bytes)
            try await harness.forwarder.waitForLedgerCount(1, on: client.channel.eventLoop)
            await client.close()
            // Wait for the server to see the close, then check nothing more was forwarded.
            try await eventually { harness.server.connectionCount == 0 }
            #expect(harness.forwarder.ledger.map(\.frame.identifier.rawValue) == [1])
        }
    }

    @Test("A client without a certificate is refused during the handshake")
    func clientCertificateRequired() async throws {
        try await withResource(try await GatewayHarness.start()) { harness in
            let client = try await LegacyConnection.connect(
                to: harness.server.localAddress,
                identity: nil,
                trusting: harness.pki.caCertificate
            )
            try? await client.send(
                FrameBuilder.frame(.itemized, identifier: 1, token: Self.token, payload: Self.payload)
            )
            let received = try await client.bytesUntilClose()
            #expect(received.readableBytes == 0)
            #expect(harness.forwarder.ledger.isEmpty)
        }
    }

    @Test("A certificate from another CA is refused during the handshake")
    func foreignCertificateRefused() async throws {
        try await withResource(try await GatewayHarness.start()) { harness in
            let stranger = try DevelopmentCA(name: "someone else's CA")
            let client = try await LegacyConnection.connect(
                to: harness.server.localAddress,
                identity: try stranger.providerIdentity(bundleID: "com.example.app"),
                trusting: harness.pki.caCertificate
            )
            try? await client.send(
                FrameBuilder.frame(.itemized, identifier: 1, token: Self.token, payload: Self.payload)
            )
            let received = try await client.bytesUntilClose()
            #expect(received.readableBytes == 0)
            #expect(harness.forwarder.ledger.isEmpty)
        }
    }
}

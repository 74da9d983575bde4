import Crypto
import Foundation
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import Synchronization
import Testing
@_spi(Benchmarks) import UpstreamAPNs

@Suite("apns-id generator")
struct APNsIDGeneratorTests {
    @Test("Ids are lowercase UUIDs of version 4 layout, and unique")
    func shapeAndUniqueness() {
        let generator = APNsIDGenerator()
        var seen = Set<String>()
        for _ in 0..<10_000 {
            let id = generator.next()
            #expect(UUID(uuidString: id) != nil)
            #expect(id == id.lowercased())
            let groups = id.split(separator: "-")
            #expect(groups[2].first == "4")
            #expect("89ab".contains(groups[3].first!))
            seen.insert(id)
        }
        #expect(seen.count == 10_000)
        #expect(APNsIDGenerator().next() != generator.next(), "another generator has another prefix")
    }
}

@Suite("Push type inference (docs/upstream.md#requests)")
struct APNsPushTypeTests {
    @Test(
        "Topic suffixes",
        arguments: [
            ("com.example.app.voip", APNsPushType.voip),
            ("com.example.app.complication", .complication),
            ("com.example.app.pushkit.fileprovider", .fileprovider),
            ("com.example.app.push-type.liveactivity", .liveactivity),
            ("com.example.app", .alert),
        ]
    )
    func topics(topic: String, expected: APNsPushType) {
        #expect(APNsPushType.infer(topic: topic, payload: ByteBuffer(string: #"{"aps":{"alert":"x"}}"#)) == expected)
    }

    @Test(
        "Payloads",
        arguments: [
            (#"{"aps":{"content-available":1}}"#, APNsPushType.background),
            (#"{"aps":{"content-available":1},"custom":2}"#, .background),
            (#"{"aps":{"content-available":1,"sound":"a"}}"#, .alert),
            (#"{"aps":{"alert":"content-available"}}"#, .alert),
            (#"{"aps":{}}"#, .alert),
            (#"not json content-available"#, .alert),
            // The scan: candidates that start like the marker, and one cut short at the end.
            (#"{"c":"cc","aps":{"content-available":1}}"#, .background),
            (#"{"aps":{"alert":"x"},"c":"content-availabl"}"#, .alert),
        ]
    )
    func payloads(payload: String, expected: APNsPushType) {
        #expect(APNsPushType.infer(topic: "com.example.app", payload: ByteBuffer(string: payload)) == expected)
    }
}

@Suite("Request headers")
struct APNsRequestHeaderEncoderTests {
    @Test("HPACK indexing as Apple asks: apns-id, apns-collapse-id and apns-expiration indexed once, then not")
    func indexing() {
        var encoder = APNsRequestHeaderEncoder(authority: "api.push.apple.com")
        let request = APNsRequest(
            path: "/3/device/00",
            topic: "t",
            pushType: .alert,
            priority: 10,
            expiration: 0,
            apnsID: "00000000-0000-4000-8000-000000000000",
            payload: ByteBuffer(string: "{}")
        )
        func indexing(_ headers: HPACKHeaders, _ name: String) -> HPACKIndexing? {
            headers.first { $0.name == name }?.indexable
        }
        let first = encoder.headers(for: request, authorization: "bearer x")
        let second = encoder.headers(for: request, authorization: "bearer x")
        #expect(indexing(first, ":path") == .nonIndexable)
        #expect(indexing(first, "authorization") == .neverIndexed)
        #expect(indexing(first, "apns-id") == .indexable)
        #expect(indexing(second, "apns-id") == .nonIndexable)
        #expect(indexing(first, "apns-collapse-id") == .indexable)
        #expect(indexing(second, "apns-collapse-id") == .nonIndexable)
        #expect(
            second.first(name: "apns-collapse-id") == "00000000-0000-4000-8000-000000000000",
            "a device request's collapse id is its id"
        )
        #expect(indexing(first, "apns-expiration") == .indexable)
        #expect(indexing(second, "apns-expiration") == .nonIndexable)
        #expect(indexing(second, "apns-topic") == .indexable)
        #expect(second.first(name: ":authority") == "api.push.apple.com")
        #expect(encoder.headers(for: request, authorization: nil).first(name: "authorization") == nil)
    }

    @Test("A broadcast names its channel and request id, and no topic; channel management sends its method")
    func broadcastAndManagement() {
        var encoder = APNsRequestHeaderEncoder(authority: "api-broadcast.push.apple.com")
        let broadcast = APNsRequest.broadcast(
            bundleID: "com.example.app",
            channelID: "dHN0LXNyY2gtY2hubA==",
            priority: 1,
            expiration: 0,
            requestID: "00000000-0000-4000-8000-000000000001",
            payload: ByteBuffer(string: "{}")
        )
        let headers = encoder.headers(for: broadcast, authorization: "bearer x")
        #expect(headers.first(name: ":method") == "POST")
        #expect(headers.first(name: ":path") == "/4/broadcasts/apps/com.example.app")
        #expect(headers.first(name: "apns-channel-id") == "dHN0LXNyY2gtY2hubA==")
        #expect(headers.first(name: "apns-request-id") == "00000000-0000-4000-8000-000000000001")
        #expect(headers.first(name: "apns-push-type") == "liveactivity")
        #expect(headers.first(name: "apns-priority") == "1")
        #expect(headers.first(name: "apns-expiration") == "0")
        #expect(headers.first(name: "apns-topic") == nil && headers.first(name: "apns-id") == nil)
        #expect(headers.first(name: "apns-collapse-id") == nil, "the broadcast API takes no collapse id")
        #expect(headers.first { $0.name == "authorization" }?.indexable == .neverIndexed)

        let delete = APNsRequest.channelManagement(
            method: "DELETE",
            path: "/1/apps/com.example.app/channels",
            channelID: "dHN0LXNyY2gtY2hubA==",
            requestID: "00000000-0000-4000-8000-000000000002"
        )
        let deleteHeaders = encoder.headers(for: delete, authorization: nil)
        #expect(deleteHeaders.first(name: ":method") == "DELETE")
        #expect(deleteHeaders.first(name: "apns-channel-id") == "dHN0LXNyY2gtY2hubA==")
        #expect(deleteHeaders.first(name: "apns-push-type") == nil && deleteHeaders.first(name: "content-type") == nil)
        #expect(deleteHeaders.first(name: "content-length") == "0")
    }

    @Test("A device path and a generated id, written as bytes, are the bytes of their text")
    func bytesWithoutStrings() {
        let token = ByteBuffer(bytes: (0..<32).map { UInt8($0 * 8 + 3) })
        let id = APNsRequestID(high: 0x0123_4567_89AB_4DEF, low: 0x8FED_CBA9_8765_4321)
        #expect(id.description == "01234567-89ab-4def-8fed-cba987654321")
        let request = APNsRequest(
            deviceToken: token,
            topic: "com.example.app",
            pushType: .alert,
            priority: 10,
            expiration: 0,
            id: id,
            payload: ByteBuffer(string: "{}")
        )
        let hex = token.readableBytesView.map { String($0, radix: 16) }.map { $0.count == 1 ? "0" + $0 : $0 }
        #expect(request.path == "/3/device/" + hex.joined())
        #expect(request.apnsID == id.description)
        #expect(request.unsendableHeader == nil)

        // What the libnghttp2 engine writes, field by field, against the text the NIOHTTP2
        // engine sends.
        var encoder = APNsRequestHeaderEncoder(authority: "api.push.apple.com")
        var fields: [(String, [UInt8], String)] = []
        encoder.forEachField(of: request, authorization: "bearer x") { name, value, _ in
            // Written into more room than it needs: the count it answers is what it wrote.
            var bytes = [UInt8](repeating: 0x2A, count: value.byteCount + 8)
            let written = bytes.withUnsafeMutableBytes { value.write(into: $0) }
            #expect(written == value.byteCount && bytes[written...].allSatisfy { $0 == 0x2A }, "\(name)")
            fields.append((name.description, Array(bytes[..<written]), value.string))
        }
        #expect(
            fields.map(\.0) == [
                ":method", ":scheme", ":path", ":authority", "authorization", "apns-id", "apns-collapse-id",
                "apns-expiration", "apns-priority", "apns-topic", "apns-push-type", "content-length",
            ]
        )
        #expect(fields.first { $0.0 == "apns-expiration" }?.2 == "0")
        #expect(fields.first { $0.0 == "content-length" }?.2 == "2")
        #expect(fields.first { $0.0 == ":path" }?.2 == request.path)
        #expect(fields.first { $0.0 == "apns-id" }?.2 == request.apnsID)
        #expect(fields.first { $0.0 == "apns-collapse-id" }?.2 == request.apnsID)
        for (name, bytes, text) in fields {
            #expect(bytes == Array(text.utf8), "\(name)")
        }
        var second = APNsRequestHeaderEncoder(authority: "api.push.apple.com")
        let text = second.headers(for: request, authorization: nil)
        #expect(text.first(name: ":path") == request.path && text.first(name: "apns-id") == request.apnsID)
        #expect(text.first(name: "apns-collapse-id") == request.apnsID)
    }
}

@Suite("Authentication tokens")
struct AuthenticationTokenSourceTests {
    final class Clock: Sendable {
        let value = Mutex(Date(timeIntervalSince1970: 1_800_000_000))
        func advance(_ seconds: TimeInterval) { self.value.withLock { $0 += seconds } }
    }

    @Test("One token reused for 50 minutes; ExpiredProviderToken mints only when 20 minutes allow")
    func refreshPolicy() throws {
        let clock = Clock()
        let key = P256.Signing.PrivateKey()
        let source = AuthenticationTokenSource(
            signer: AuthenticationTokenSigner(key: key, keyID: "KEY", teamID: "TEAM"),
            logger: Logger(label: "test"),
            now: { clock.value.withLock { $0 } }
        )
        let first = try source.currentToken()
        clock.advance(49 * 60)
        #expect(try source.currentToken() == first)
        clock.advance(60)
        let second = try source.currentToken()
        #expect(second.generation == 2)
        clock.advance(5 * 60)
        #expect(try source.tokenAfterExpiry(of: 2) == second, "too soon after the last mint")
        clock.advance(16 * 60)
        let third = try source.tokenAfterExpiry(of: 2)
        #expect(third.generation == 3)
        #expect(try source.tokenAfterExpiry(of: 2) == third, "another request already replaced it")
        #expect(source.mintCount == 3)
    }

    @Test("The JWT is ES256 with kid, iss and iat, and verifies with the key")
    func tokenShape() throws {
        let key = P256.Signing.PrivateKey()
        let jwt = try AuthenticationTokenSigner(key: key, keyID: "ABC123DEFG", teamID: "DEF123GHIJ").sign(
            issuedAt: Date(timeIntervalSince1970: 1_700_000_000)
        )
        let parts = jwt.split(separator: ".")
        #expect(parts.count == 3)
        let header = String(decoding: Base64URL.decode(parts[0])!, as: UTF8.self)
        let claims = String(decoding: Base64URL.decode(parts[1])!, as: UTF8.self)
        #expect(header == #"{"alg":"ES256","kid":"ABC123DEFG"}"#)
        #expect(claims == #"{"iss":"DEF123GHIJ","iat":1700000000}"#)
        let signature = try P256.Signing.ECDSASignature(rawRepresentation: Base64URL.decode(parts[2])!)
        #expect(key.publicKey.isValidSignature(signature, for: Data((parts[0] + "." + parts[1]).utf8)))
    }
}

@Suite("Connection flow-control window")
struct InboundConnectionWindowTests {
    @Test("A WINDOW_UPDATE is due once half the window was consumed, for what was consumed")
    func updates() {
        var window = InboundConnectionWindow(size: 1000)
        let body = HTTP2Frame.FramePayload.Data(data: .byteBuffer(ByteBuffer(repeating: 0, count: 300)))
        #expect(window.received(body) == nil)
        #expect(window.received(body) == 600)
        #expect(window.received(body) == nil)
    }
}

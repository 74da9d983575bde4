import NIOCore
import NIOEmbedded
import NIOHPACK
import Synchronization
import Testing
import UpstreamAPNs
import UpstreamEngineFuzzing

/// Both HTTP/2 engines on an EmbeddedChannel, the server played as the same raw frames
/// (``ServerFrames``): answers, GOAWAY, resets, SETTINGS, deadlines and PINGs give the same
/// completions, closes and stream limits on either, and completions that re-enter the handler
/// or close the connection are safe. Without the `NGHTTP2Engine` trait only the NIOHTTP2 engine
/// runs; CI runs the suite in both builds.
@Suite("HTTP/2 engines: the same server conversations, the same results")
struct EngineParityTests {
    static let engines = APNsHTTP2Engine.available

    /// The frames in the client's output: (type, flags, stream, payload).
    static func frames(_ bytes: [UInt8]) -> [(type: UInt8, flags: UInt8, stream: UInt32, payload: ArraySlice<UInt8>)] {
        var frames: [(UInt8, UInt8, UInt32, ArraySlice<UInt8>)] = []
        var index = 0
        // The connection preface comes first once.
        let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
        if bytes.starts(with: preface) { index = preface.count }
        while index + 9 <= bytes.count {
            let length = Int(bytes[index]) << 16 | Int(bytes[index + 1]) << 8 | Int(bytes[index + 2])
            let stream =
                UInt32(bytes[index + 5]) << 24 | UInt32(bytes[index + 6]) << 16 | UInt32(bytes[index + 7]) << 8
                | UInt32(bytes[index + 8])
            let payload = bytes[min(index + 9, bytes.count)..<min(index + 9 + length, bytes.count)]
            frames.append((bytes[index + 3], bytes[index + 4], stream & 0x7FFF_FFFF, payload))
            index += 9 + length
        }
        return frames
    }

    static func status(_ results: [Result<APNsResponse, APNsStreamFailure>]) -> Int? {
        guard results.count == 1, case .success(let response) = results[0] else { return nil }
        return response.status
    }

    static func failure(_ results: [Result<APNsResponse, APNsStreamFailure>]) -> APNsStreamFailure.Kind? {
        guard results.count == 1, case .failure(let failure) = results[0] else { return nil }
        return failure.kind
    }

    @Test(
        "SETTINGS set the stream limit; answers complete their requests, a JSON reason read from the body",
        arguments: Self.engines
    )
    func settingsAndAnswers(engine: APNsHTTP2Engine) throws {
        let harness = try UpstreamEngineHarness(engine: engine)
        let opening = Self.frames(harness.clientOutput())
        #expect(
            opening.first?.type == ServerFrames.settings,
            "the preface and our SETTINGS go out when the channel is active"
        )
        harness.serverWrites(ServerFrames.settings([(3, 2)]))
        #expect(harness.limits.last == 2)
        let ok = harness.send()
        let bad = harness.send()
        let sent = Self.frames(harness.clientOutput())
        #expect(sent.filter { $0.type == ServerFrames.headers }.map(\.stream) == [1, 3])
        // NIOHTTP2 writes flow-controlled DATA in the order of a dictionary (per process).
        #expect(
            sent.filter { $0.type == ServerFrames.data }.map(\.stream).sorted() == [1, 3],
            "each body in a DATA frame"
        )
        #expect(
            sent.contains { $0.type == ServerFrames.settings && $0.flags == ServerFrames.ack },
            "the server's SETTINGS acknowledged"
        )
        harness.serverWrites(
            ServerFrames.answer(stream: 1, status: 200)
                + ServerFrames.answer(stream: 3, status: 400, reason: "BadDeviceToken")
        )
        #expect(Self.status(harness.results(of: ok)) == 200)
        guard case .success(let refused)? = harness.results(of: bad).first else {
            Issue.record("no answer for the second request")
            return
        }
        #expect(refused.status == 400 && refused.reason == .badDeviceToken)
        harness.serverWrites(ServerFrames.settings([(3, 1)]))
        #expect(harness.limits.last == 1, "a later SETTINGS lowers the limit")
        harness.close()
        #expect(harness.completionsAfterSeal == 0)
    }

    /// The header blocks of the HEADERS frames in the client's output (no CONTINUATION: every
    /// block here fits in one frame), padding and priority fields removed.
    static func headerBlocks(_ bytes: [UInt8]) -> [ByteBuffer] {
        Self.frames(bytes).filter { $0.type == ServerFrames.headers }.map { frame in
            var block = frame.payload
            if frame.flags & 0x8 != 0 {  // PADDED
                let padding = Int(block.removeFirst())
                block = block.dropLast(padding)
            }
            if frame.flags & 0x20 != 0 { block = block.dropFirst(5) }  // PRIORITY
            return ByteBuffer(bytes: block)
        }
    }

    @Test(
        "The server decodes the same header fields from either engine, a long authorization included",
        arguments: Self.engines
    )
    func headerFields(engine: APNsHTTP2Engine) throws {
        let harness = try UpstreamEngineHarness(engine: engine)
        harness.serverWrites(ServerFrames.settings())
        // Longer than the libnghttp2 engine's first header buffer (1 KiB): it grows mid-block.
        let long = "bearer " + String(repeating: "x", count: 3000)
        harness.send(authorization: "bearer short")
        harness.send(payload: String(repeating: "y", count: 1234), authorization: long)
        harness.send(authorization: "bearer short")
        var decoder = HPACKDecoder(allocator: ByteBufferAllocator())
        let blocks = try Self.headerBlocks(harness.clientOutput()).map { block in
            var block = block
            return try decoder.decodeHeaders(from: &block).map { "\($0.name): \($0.value)" }
        }
        func expected(_ number: Int, authorization: String, length: Int) -> [String] {
            let id = APNsRequestID(high: 0x4000, low: 0x8000_0000_0000_0000 | UInt64(number))
            var token = ByteBuffer()
            token.writeInteger(UInt64(number))
            token.writeRepeatingByte(0xAB, count: 24)
            let hex = token.readableBytesView.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
            return [
                ":method: POST", ":scheme: https", ":path: /3/device/\(hex)", ":authority: api.sandbox.push.apple.com",
                "authorization: \(authorization)", "apns-id: \(id)", "apns-collapse-id: \(id)", "apns-expiration: 0",
                "apns-priority: 10",
                "apns-topic: com.example.app", "apns-push-type: alert", "content-length: \(length)",
            ]
        }
        #expect(blocks.count == 3)
        #expect(blocks.first == expected(0, authorization: "bearer short", length: 22))
        #expect(blocks.dropFirst().first == expected(1, authorization: long, length: 1234))
        #expect(blocks.last == expected(2, authorization: "bearer short", length: 22))
        harness.close()
    }

    @Test(
        "GOAWAY with a JSON reason: streams above its last stream id fail unprocessed, the one below is still answered, then the connection closes",
        arguments: Self.engines
    )
    func goAway(engine: APNsHTTP2Engine) throws {
        let harness = try UpstreamEngineHarness(engine: engine)
        harness.serverWrites(ServerFrames.settings())
        let below = harness.send()
        let above = harness.send()
        _ = harness.clientOutput()
        harness.serverWrites(ServerFrames.goAway(lastStream: 1, code: 0, debug: #"{"reason":"Shutdown"}"#))
        #expect(Self.failure(harness.results(of: above)) == .unprocessed)
        #expect(harness.results(of: below).isEmpty)
        #expect(harness.limits.last == 0, "no new streams after GOAWAY")
        harness.serverWrites(ServerFrames.answer(stream: 1, status: 200))
        #expect(Self.status(harness.results(of: below)) == 200)
        #expect(!harness.channel.isActive, "drained: closed")
        #expect(harness.closedEvents == 1)
        harness.close()
        #expect(harness.completionsAfterSeal == 0)
    }

    @Test(
        "RST_STREAM: REFUSED_STREAM is unprocessed, PROTOCOL_ERROR refuses the request, others interrupt it",
        arguments: Self.engines,
        [(UInt32(7), APNsStreamFailure.Kind.unprocessed), (1, .refused), (2, .interrupted), (8, .interrupted)]
    )
    func resets(engine: APNsHTTP2Engine, reset: (code: UInt32, expected: APNsStreamFailure.Kind)) throws {
        let (code, expected) = reset
        let harness = try UpstreamEngineHarness(engine: engine)
        harness.serverWrites(ServerFrames.settings())
        let reset = harness.send()
        let other = harness.send()
        _ = harness.clientOutput()
        harness.serverWrites(ServerFrames.resetStream(1, code: code))
        #expect(Self.failure(harness.results(of: reset)) == expected)
        #expect(harness.results(of: other).isEmpty, "one stream's reset leaves the others")
        #expect(harness.channel.isActive)
        harness.serverWrites(ServerFrames.answer(stream: 3, status: 200))
        #expect(Self.status(harness.results(of: other)) == 200)
        harness.close()
    }

    @Test(
        "A completion that sends the next request on the same connection: written after the engine returned, and answered",
        arguments: Self.engines
    )
    func completionReentersSend(engine: APNsHTTP2Engine) throws {
        let harness = try UpstreamEngineHarness(engine: engine)
        harness.serverWrites(ServerFrames.settings())
        let followUp = Mutex<Int?>(nil)
        let box = UncheckedBox(harness)
        let first = harness.send { _ in
            followUp.withLock { $0 = box.value.send() }
        }
        _ = harness.clientOutput()
        harness.serverWrites(ServerFrames.answer(stream: 1, status: 200))
        #expect(Self.status(harness.results(of: first)) == 200)
        let next = try #require(followUp.withLock { $0 })
        #expect(Self.frames(harness.clientOutput()).contains { $0.type == ServerFrames.headers && $0.stream == 3 })
        harness.serverWrites(ServerFrames.answer(stream: 3, status: 200))
        #expect(Self.status(harness.results(of: next)) == 200)
        harness.close()
        #expect(harness.completionsAfterSeal == 0)
    }

    @Test(
        "A completion that closes the connection: every other request fails once, none after the close",
        arguments: Self.engines
    )
    func completionClosesTheConnection(engine: APNsHTTP2Engine) throws {
        let harness = try UpstreamEngineHarness(engine: engine)
        harness.serverWrites(ServerFrames.settings())
        let channel = UncheckedBox(harness.channel)
        let closer = harness.send { _ in channel.value.close(promise: nil) }
        let others = (0..<3).map { _ in harness.send() }
        _ = harness.clientOutput()
        harness.serverWrites(ServerFrames.answer(stream: 1, status: 200) + ServerFrames.answer(stream: 3, status: 200))
        #expect(Self.status(harness.results(of: closer)) == 200)
        #expect(Self.status(harness.results(of: others[0])) == 200, "answered in the same read, before the close")
        #expect(others.dropFirst().allSatisfy { harness.results(of: $0).count == 1 })
        #expect(!harness.channel.isActive)
        harness.close()
        #expect(harness.completionsAfterSeal == 0)
    }

    @Test(
        "Deadlines and PINGs: an unanswered stream is reset (CANCEL) and interrupted; a PING unanswered by the next one closes",
        arguments: Self.engines
    )
    func deadlinesAndPings(engine: APNsHTTP2Engine) throws {
        let harness = try UpstreamEngineHarness(engine: engine)
        harness.serverWrites(ServerFrames.settings())
        let late = harness.send(deadline: harness.loop.now + .seconds(5))
        _ = harness.clientOutput()
        harness.advanceTime(by: .seconds(6))
        #expect(Self.failure(harness.results(of: late)) == .interrupted)
        #expect(Self.frames(harness.clientOutput()).contains { $0.type == ServerFrames.rstStream && $0.stream == 1 })
        harness.advanceTime(by: .seconds(60))
        #expect(Self.frames(harness.clientOutput()).contains { $0.type == ServerFrames.ping && $0.flags == 0 })
        harness.serverWrites(ServerFrames.pingAcknowledged())
        harness.advanceTime(by: .seconds(60))
        #expect(harness.channel.isActive, "the first PING was answered")
        harness.advanceTime(by: .seconds(60))
        #expect(!harness.channel.isActive, "the second was not: the connection is replaced")
        harness.close()
    }

    @Test("Bytes that are not HTTP/2 close the connection; the requests in flight fail once", arguments: Self.engines)
    func garbage(engine: APNsHTTP2Engine) throws {
        let harness = try UpstreamEngineHarness(engine: engine)
        harness.serverWrites(ServerFrames.settings())
        let requests = (0..<4).map { _ in harness.send() }
        _ = harness.clientOutput()
        harness.serverWrites(Array("HTTP/1.1 400 Bad Request\r\n\r\n".utf8))
        #expect(!harness.channel.isActive)
        #expect(requests.allSatisfy { harness.results(of: $0).count == 1 })
        harness.close()
        #expect(harness.completionsAfterSeal == 0)
    }
}

/// A value handed to a completion closure, which must be Sendable; the tests run on one thread
/// (the EmbeddedEventLoop's).
final class UncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import UpstreamAPNs

/// One HTTP/2 engine's handlers on an `EmbeddedChannel` (what ``APNsEnginePipeline`` puts after
/// TLS: `NIOHTTP2Handler` and ``APNsConnectionHandler``, or ``NGHTTP2ConnectionHandler``), with
/// the server side played by the caller as raw bytes (``ServerFrames``): for the engine parity
/// tests and the engine fuzzer. No TLS, no socket, time moved by hand.
package final class UpstreamEngineHarness {
    package let loop = EmbeddedEventLoop()
    package let channel: EmbeddedChannel
    package let engine: APNsHTTP2Engine
    private let handler: any APNsConnectionDriver
    /// Completions per request number, and the ones that came after the harness was sealed.
    private let record = NIOLockedValueBox(Record())
    private var nextRequest = 0

    private struct Record {
        var completions: [Int: [Result<APNsResponse, APNsStreamFailure>]] = [:]
        var sealed = false
        var afterSeal = 0
        var closedEvents = 0
        var limits: [Int] = []
    }

    /// - Parameter oneStreamUntilFirstSuccess: Apple's rule for token connections; off lets a
    ///   test or the fuzzer have many streams open from the start.
    package init(
        engine: APNsHTTP2Engine,
        oneStreamUntilFirstSuccess: Bool = false,
        maximumResponseBodyLength: Int = 2048
    ) throws {
        self.engine = engine
        self.channel = EmbeddedChannel(loop: self.loop)
        var client = APNsClient.Configuration()
        client.engine = engine
        client.maximumResponseBodyLength = maximumResponseBodyLength
        let configuration = APNsConnectionConfiguration(
            authority: "api.sandbox.push.apple.com",
            client: client,
            usesAuthenticationTokens: oneStreamUntilFirstSuccess,
            metrics: APNsClientMetrics()
        )
        var logger = Logger(label: "apns-bridge.engine-harness")
        logger.logLevel = .critical
        let pipeline = self.channel.pipeline.syncOperations
        try APNsEnginePipeline.addEngine(
            to: pipeline,
            connectionID: 0,
            configuration: configuration,
            readyPromise: self.loop.makePromise(),
            logger: logger
        )
        self.handler = try APNsEnginePipeline.engineHandler(in: pipeline, engine: engine)
        let record = self.record
        self.handler.setEvents(
            .init(
                limitChanged: { limit in record.withLockedValue { $0.limits.append(limit) } },
                closed: { record.withLockedValue { $0.closedEvents += 1 } }
            )
        )
        try self.channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
    }

    /// The stream limits the handler told its pool, in order.
    package var limits: [Int] { self.record.withLockedValue { $0.limits } }

    /// Whether the handler told its pool the connection closed.
    package var closedEvents: Int { self.record.withLockedValue { $0.closedEvents } }

    /// Sends a request; returns its number. `then` runs after the completion was recorded, on
    /// the loop, inside the handler's call (to re-enter it).
    @discardableResult
    package func send(
        payload: String = #"{"aps":{"alert":"hi"}}"#,
        authorization: String = "bearer test",
        deadline: NIODeadline = .uptimeNanoseconds(UInt64.max / 2),
        then: (@Sendable (Result<APNsResponse, APNsStreamFailure>) -> Void)? = nil
    ) -> Int {
        let number = self.nextRequest
        self.nextRequest += 1
        var token = ByteBuffer()
        token.writeInteger(UInt64(number))
        token.writeRepeatingByte(0xAB, count: 24)
        let request = APNsRequest(
            deviceToken: token,
            topic: "com.example.app",
            pushType: .alert,
            priority: 10,
            expiration: 0,
            id: APNsRequestID(high: 0x4000, low: 0x8000_0000_0000_0000 | UInt64(number)),
            payload: ByteBuffer(string: payload)
        )
        let record = self.record
        let owner = StreamCallback { result in
            record.withLockedValue { record in
                record.completions[number, default: []].append(result)
                if record.sealed { record.afterSeal += 1 }
            }
            then?(result)
        }
        self.handler.send(request, authorization: authorization, deadline: deadline, owner: owner)
        return number
    }

    /// Bytes from the server, as one read; then what the loop has scheduled runs.
    package func serverWrites(_ bytes: [UInt8]) {
        guard self.channel.isActive else { return }
        _ = try? self.channel.writeInbound(ByteBuffer(bytes: bytes))
        self.channel.pipeline.fireChannelReadComplete()
        self.loop.run()
    }

    /// Everything the client has written since the last call.
    package func clientOutput() -> [UInt8] {
        self.loop.run()
        var bytes: [UInt8] = []
        // NIOHTTP2 writes `IOData`, the libnghttp2 engine `ByteBuffer`s.
        while let data = try? self.channel.readOutbound(as: IOData.self) {
            guard case .byteBuffer(let buffer) = data else { continue }
            bytes += buffer.readableBytesView
        }
        return bytes
    }

    package func advanceTime(by amount: TimeAmount) {
        self.loop.advanceTime(by: amount)
    }

    /// The completions of request `number` so far.
    package func results(of number: Int) -> [Result<APNsResponse, APNsStreamFailure>] {
        self.record.withLockedValue { $0.completions[number] ?? [] }
    }

    /// Requests sent so far.
    package var requestCount: Int { self.nextRequest }

    /// Closes the connection (as the socket closing would) and seals the record: from now on
    /// any completion is a bug, counted in ``completionsAfterSeal``.
    package func close() {
        _ = try? self.channel.finish(acceptAlreadyClosed: true)
        self.loop.run()
        self.record.withLockedValue { $0.sealed = true }
        self.loop.advanceTime(by: .hours(2))
        self.loop.run()
    }

    package var completionsAfterSeal: Int { self.record.withLockedValue { $0.afterSeal } }
}

/// A closure as the stream's owner: the harness has no object of its own per request.
private final class StreamCallback: APNsStreamOwner {
    private let body: @Sendable (Result<APNsResponse, APNsStreamFailure>) -> Void

    init(_ body: @escaping @Sendable (Result<APNsResponse, APNsStreamFailure>) -> Void) {
        self.body = body
    }

    func streamEnded(_ result: Result<APNsResponse, APNsStreamFailure>, onConnection connectionID: Int) {
        self.body(result)
    }
}

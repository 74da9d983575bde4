import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOTLS

/// Drives one HTTP/2 connection to APNs at the frame level: it sits after `NIOHTTP2Handler`
/// (without a stream multiplexer, so no child channel per stream), opens a stream per request,
/// and completes each request's promise from the stream's frames.
///
/// What it keeps track of, on the channel's event loop:
/// - open streams and their partial responses, by stream id;
/// - the stream limit it offers its pool: 0 while going away, 1 until the first success on a
///   provider-token connection (Apple asks for that), otherwise the server's
///   `MAX_CONCURRENT_STREAMS` capped by our own bound (NIOHTTP2 would buffer streams above the
///   server's limit without a bound of its own);
/// - GOAWAY: the `lastStreamID` (NIOHTTP2 reports unprocessed streams closed with the same
///   reason as a cancel, so the id is kept here) and the JSON reason in its debug data;
/// - PINGs: one sent every interval; one still unanswered when the next is due means the
///   connection is dead, and it is closed;
/// - `REFUSED_STREAM` resets: too many in a window and the connection is given up.
///
/// Requests that certainly were not processed (above `lastStreamID`, refused, never written)
/// fail with ``APNsStreamFailure/Kind/unprocessed``; those lost with a reset or a closed
/// connection fail with ``APNsStreamFailure/Kind/interrupted``.
final class APNsConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    struct Configuration: Sendable {
        var authority: String
        /// Our own bound on open streams, whatever the server allows.
        var maximumStreams: Int = 1000
        var oneStreamUntilFirstSuccess: Bool = true
        var pingInterval: TimeAmount = .seconds(60)
        /// More `REFUSED_STREAM` resets than this within `refusedStreamWindow` and the
        /// connection is replaced.
        var refusedStreamLimit: Int = 100
        var refusedStreamWindow: TimeAmount = .seconds(30)
        var maximumResponseBodyLength: Int = 2048
        /// How often open streams are checked against their deadlines.
        var deadlineSweepInterval: TimeAmount = .milliseconds(100)
        var metrics: APNsClientMetrics
    }

    /// Told to the pool, on the event loop.
    struct Events {
        var limitChanged: (Int) -> Void
        var closed: () -> Void
    }

    private struct OpenStream {
        var promise: EventLoopPromise<APNsResponse>
        /// When the stream is reset if the server has not answered: an upstream that answers
        /// PINGs but never a stream must not hold a notification (and its provider) forever.
        var deadline: NIODeadline
        var status: Int?
        var apnsID: String?
        var uniqueID: String?
        var body = ByteBuffer()
    }

    private let configuration: Configuration
    private var events: Events?
    private let logger: Logger
    private let readyPromise: EventLoopPromise<Void>
    private var context: ChannelHandlerContext?

    private var streams: [HTTP2StreamID: OpenStream] = [:]
    private var nextStreamID = HTTP2StreamID(1)
    private var headerEncoder: APNsRequestHeaderEncoder
    private var isReady = false
    private var isClosed = false
    private var goAwayLastStreamID: HTTP2StreamID?
    private var isGoingAway: Bool { self.goAwayLastStreamID != nil || self.givenUp }
    private var givenUp = false
    private var serverMaximumStreams: Int?
    private var hasSucceeded = false
    private var reportedLimit = 0
    private var flushScheduled = false
    private var pingTask: Scheduled<Void>?
    private var pingOutstanding = false
    private var pingCounter: UInt64 = 0
    private var refusedTimes: [NIODeadline] = []
    private var inboundWindow = InboundConnectionWindow()
    private var closedDuringRead: [HTTP2StreamID] = []
    private var deadlineSweep: Scheduled<Void>?

    init(configuration: Configuration, readyPromise: EventLoopPromise<Void>, logger: Logger) {
        self.configuration = configuration
        self.readyPromise = readyPromise
        self.logger = logger
        self.headerEncoder = APNsRequestHeaderEncoder(authority: configuration.authority)
    }

    func setEvents(_ events: Events) {
        self.events = events
        self.reportedLimit = self.streamLimit
        events.limitChanged(self.reportedLimit)
    }

    /// The streams the pool may have open now.
    var streamLimit: Int {
        if self.isClosed || self.isGoingAway || !self.isReady { return 0 }
        if self.configuration.oneStreamUntilFirstSuccess && !self.hasSucceeded { return 1 }
        return min(self.serverMaximumStreams ?? self.configuration.maximumStreams, self.configuration.maximumStreams)
    }

    // MARK: Requests

    /// Writes the request on a new stream; the stream is reset, and the promise failed as
    /// interrupted, if no answer has come by `deadline`.
    func send(_ request: APNsRequest, authorization: String?, deadline: NIODeadline, promise: EventLoopPromise<APNsResponse>) {
        guard let context, !self.isClosed, !self.isGoingAway else {
            promise.fail(APNsStreamFailure.unprocessed("the connection is closing"))
            return
        }
        let streamID = self.nextStreamID
        // Stream ids are 31 bits; well before they run out, hand over to a new connection.
        if Int32(streamID) > Int32.max - 4096 {
            self.giveUp(context: context, why: "stream ids nearly exhausted")
        } else {
            self.nextStreamID = HTTP2StreamID(Int32(streamID) + 2)
        }
        self.streams[streamID] = OpenStream(promise: promise, deadline: deadline)
        if self.deadlineSweep == nil {
            self.scheduleDeadlineSweep(context: context)
        }
        let headers = self.headerEncoder.headers(for: request, authorization: authorization)
        let hasBody = request.payload.readableBytes > 0
        context.write(
            self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: !hasBody)))),
            promise: nil
        )
        if hasBody {
            context.write(
                self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(request.payload), endStream: true)))),
                promise: nil
            )
        }
        self.scheduleFlush(context: context)
        self.logger.trace("request sent", metadata: ["stream": "\(streamID)", "apns-id": "\(request.apnsID)"])
    }

    /// Requests written in one event-loop tick share one flush.
    private func scheduleFlush(context: ChannelHandlerContext) {
        guard !self.flushScheduled else { return }
        self.flushScheduled = true
        context.eventLoop.assumeIsolated().execute {
            self.flushScheduled = false
            self.context?.flush()
        }
    }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        self.schedulePing(context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.isClosed = true
        self.pingTask?.cancel()
        self.pingTask = nil
        self.deadlineSweep?.cancel()
        self.deadlineSweep = nil
        if !self.isReady {
            self.readyPromise.fail(APNsStreamFailure.unprocessed("the connection closed before HTTP/2 was set up"))
        }
        let streams = self.streams
        self.streams.removeAll()
        for (streamID, stream) in streams {
            if let lastStreamID = self.goAwayLastStreamID, streamID > lastStreamID {
                stream.promise.fail(APNsStreamFailure.unprocessed("above the GOAWAY's last stream id"))
            } else {
                stream.promise.fail(APNsStreamFailure.interrupted("the connection closed"))
            }
        }
        self.reportLimit()
        self.events?.closed()
        self.events = nil
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted(let negotiated) = tlsEvent {
            if negotiated != "h2" {
                self.logger.error("the upstream did not agree to HTTP/2 (ALPN h2)", metadata: ["alpn": "\(negotiated ?? "none")"])
                context.close(promise: nil)
            }
        } else if let closed = event as? StreamClosedEvent {
            self.streamClosed(closed.streamID, reason: closed.reason, context: context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.logger.debug("upstream connection error", metadata: ["error": "\(error)"])
        if error is NIOHTTP2Errors.StreamClosed || error is NIOHTTP2Errors.NoSuchStream {
            return  // a late frame for a finished stream: harmless
        }
        context.close(promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if !self.closedDuringRead.isEmpty {
            let closed = self.closedDuringRead
            self.closedDuringRead.removeAll(keepingCapacity: true)
            for streamID in closed {
                self.completeStream(streamID, context: context)  // no-op when already complete
            }
        }
        context.fireChannelReadComplete()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = self.unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            guard self.streams[frame.streamID] != nil else { return }
            if let status = headers.headers.first(name: ":status") {
                self.streams[frame.streamID]!.status = Int(status)
                self.streams[frame.streamID]!.apnsID = headers.headers.first(name: "apns-id")
                self.streams[frame.streamID]!.uniqueID = headers.headers.first(name: "apns-unique-id")
            }
            if headers.endStream {
                self.completeStream(frame.streamID, context: context)
            }
        case .data(let data):
            if let update = self.inboundWindow.windowUpdate(afterReceiving: data) {
                context.write(self.wrapOutboundOut(update), promise: nil)
                self.scheduleFlush(context: context)
            }
            guard self.streams[frame.streamID] != nil else { return }
            if case .byteBuffer(var bytes) = data.data {
                let room = self.configuration.maximumResponseBodyLength - self.streams[frame.streamID]!.body.readableBytes
                if room > 0, let slice = bytes.readSlice(length: min(room, bytes.readableBytes)) {
                    self.streams[frame.streamID]!.body.writeImmutableBuffer(slice)
                }
            }
            if data.endStream {
                self.completeStream(frame.streamID, context: context)
            }
        case .settings(.settings(let settings)):
            for setting in settings where setting.parameter == .maxConcurrentStreams {
                self.serverMaximumStreams = setting.value
                self.logger.debug("upstream stream limit", metadata: ["max_concurrent_streams": "\(setting.value)"])
            }
            if !self.isReady {
                self.isReady = true
                self.readyPromise.succeed()
            }
            self.reportLimit()
        case .ping(_, ack: true):
            self.pingOutstanding = false
        case .goAway(let lastStreamID, let errorCode, let debugData):
            self.goAwayReceived(lastStreamID: lastStreamID, errorCode: errorCode, debugData: debugData, context: context)
        default:
            break
        }
    }

    // MARK: Streams

    private func completeStream(_ streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let stream = self.streams.removeValue(forKey: streamID) else { return }
        guard let status = stream.status else {
            stream.promise.fail(APNsStreamFailure.interrupted("the stream ended without a status"))
            self.closeIfDrained(context: context)
            return
        }
        var response = APNsResponse(status: status, apnsID: stream.apnsID, uniqueID: stream.uniqueID)
        if status != 200, let body = APNsErrorBody.parse(stream.body) {
            response.reason = body.reason
            response.timestamp = body.timestamp
        }
        if status == 200, !self.hasSucceeded {
            self.hasSucceeded = true
            self.reportLimit()
        }
        stream.promise.succeed(response)
        self.closeIfDrained(context: context)
    }

    private func streamClosed(_ streamID: HTTP2StreamID, reason: HTTP2ErrorCode?, context: ChannelHandlerContext) {
        guard let stream = self.streams[streamID] else { return }
        if reason == nil {
            // Closed normally: NIOHTTP2 may report the close before it hands over the frame
            // that carried END_STREAM (the body of an error answer). That frame arrives in the
            // same read, so the stream is completed at the end of the read at the latest.
            self.closedDuringRead.append(streamID)
            return
        }
        self.streams.removeValue(forKey: streamID)
        if let lastStreamID = self.goAwayLastStreamID, streamID > lastStreamID {
            stream.promise.fail(APNsStreamFailure.unprocessed("above the GOAWAY's last stream id"))
        } else if reason == .refusedStream {
            stream.promise.fail(APNsStreamFailure.unprocessed("REFUSED_STREAM"))
            self.noteRefusedStream(context: context)
        } else {
            stream.promise.fail(APNsStreamFailure.interrupted("stream reset (\(reason.map { "\($0)" } ?? "no reason"))"))
        }
        self.closeIfDrained(context: context)
    }

    private func noteRefusedStream(context: ChannelHandlerContext) {
        let now = NIODeadline.now()
        let windowStart = now - self.configuration.refusedStreamWindow
        self.refusedTimes.removeAll { $0 < windowStart }
        self.refusedTimes.append(now)
        if self.refusedTimes.count > self.configuration.refusedStreamLimit, !self.isGoingAway {
            self.giveUp(context: context, why: "\(self.refusedTimes.count) streams refused within \(self.configuration.refusedStreamWindow)")
        }
    }

    private func goAwayReceived(lastStreamID: HTTP2StreamID, errorCode: HTTP2ErrorCode, debugData: ByteBuffer?, context: ChannelHandlerContext) {
        let reason = debugData.flatMap(APNsErrorBody.parse)?.reason
        self.configuration.metrics.goAwayReceived()
        self.logger.warning(
            "upstream sent GOAWAY",
            metadata: [
                "reason": "\(reason?.rawValue ?? "none")", "error_code": "\(errorCode)",
                "last_stream_id": "\(lastStreamID)", "open_streams": "\(self.streams.count)",
            ]
        )
        let previous = self.goAwayLastStreamID
        self.goAwayLastStreamID = previous.map { min($0, lastStreamID) } ?? lastStreamID
        let unprocessed = self.streams.keys.filter { $0 > lastStreamID }
        for streamID in unprocessed {
            self.streams.removeValue(forKey: streamID)?.promise.fail(
                APNsStreamFailure.unprocessed("above the GOAWAY's last stream id")
            )
        }
        self.reportLimit()
        self.closeIfDrained(context: context)
    }

    /// Stops taking requests; the connection closes once its open streams have finished.
    private func giveUp(context: ChannelHandlerContext, why: String) {
        guard !self.givenUp else { return }
        self.logger.warning("replacing the upstream connection", metadata: ["why": "\(why)"])
        self.givenUp = true
        self.reportLimit()
        self.closeIfDrained(context: context)
    }

    private func closeIfDrained(context: ChannelHandlerContext) {
        if self.isGoingAway, self.streams.isEmpty, !self.isClosed {
            context.close(promise: nil)
        }
    }

    private func reportLimit() {
        let limit = self.streamLimit
        guard limit != self.reportedLimit else { return }
        self.reportedLimit = limit
        self.events?.limitChanged(limit)
    }

    // MARK: Deadlines

    /// One timer per connection while streams are open, rather than one per request.
    private func scheduleDeadlineSweep(context: ChannelHandlerContext) {
        self.deadlineSweep = context.eventLoop.assumeIsolated().scheduleTask(in: self.configuration.deadlineSweepInterval) {
            self.sweepExpiredStreams()
        }
    }

    /// Resets the streams whose deadline has passed (RST_STREAM CANCEL) and fails them as
    /// interrupted: the server may have processed them, so the client retries only within its
    /// budget, like any other interrupted stream.
    private func sweepExpiredStreams() {
        self.deadlineSweep = nil
        guard let context, !self.isClosed else { return }
        let now = NIODeadline.now()
        let expired = self.streams.filter { $0.value.deadline <= now }.map(\.key)
        if !expired.isEmpty {
            self.logger.warning(
                "upstream did not answer in time; resetting the streams",
                metadata: ["streams": "\(expired.count)", "open_streams": "\(self.streams.count)"]
            )
            self.configuration.metrics.streamsTimedOut(expired.count)
        }
        for streamID in expired {
            guard let stream = self.streams.removeValue(forKey: streamID) else { continue }
            context.write(self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.cancel))), promise: nil)
            stream.promise.fail(APNsStreamFailure.interrupted("no answer before the request's deadline; stream reset"))
        }
        if !expired.isEmpty {
            context.flush()
            self.closeIfDrained(context: context)
        }
        if !self.streams.isEmpty, !self.isClosed {
            self.scheduleDeadlineSweep(context: context)
        }
    }

    // MARK: Health

    private func schedulePing(context: ChannelHandlerContext) {
        self.pingTask = context.eventLoop.assumeIsolated().scheduleTask(in: self.configuration.pingInterval) {
            self.pingDue()
        }
    }

    private func pingDue() {
        guard let context, !self.isClosed else { return }
        self.schedulePing(context: context)
        if self.pingOutstanding {
            self.logger.warning(
                "upstream did not answer a PING; replacing the connection",
                metadata: ["interval": "\(self.configuration.pingInterval)", "open_streams": "\(self.streams.count)"]
            )
            context.close(promise: nil)
            return
        }
        self.pingOutstanding = true
        self.pingCounter &+= 1
        context.writeAndFlush(
            self.wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: self.pingCounter), ack: false))),
            promise: nil
        )
    }
}

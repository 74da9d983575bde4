import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOTLS

/// Drives one HTTP/2 connection to APNs at the frame level: it sits after `NIOHTTP2Handler`
/// (without a stream multiplexer, so no child channel per stream), opens a stream per request,
/// and calls each request's completion handler from the stream's frames.
///
/// The connection's state (phase, streams, stream credits, GOAWAY, PING health, refused streams,
/// deadlines) is an ``APNsConnectionStateMachine``; this handler turns channel events into its
/// events and executes what it returns. What it keeps itself is I/O: the header encoder (HPACK
/// indexing per connection), the flush of one event-loop tick, the timers, the connection's
/// flow-control window, and the limit it last told its pool.
/// How a request's answer (or why it got none) is handed back, on the connection's event loop:
/// one call per request, no future.
package typealias APNsResponseHandler = @Sendable (Result<APNsResponse, APNsStreamFailure>) -> Void

package final class APNsConnectionHandler: ChannelInboundHandler {
    package typealias InboundIn = HTTP2Frame
    package typealias OutboundOut = HTTP2Frame

    package struct Configuration: Sendable {
        package var authority: String
        package var stateMachine = APNsConnectionStateMachine<APNsResponseHandler>.Configuration()
        package var pingInterval: TimeAmount = .seconds(60)
        /// How often open streams are checked against their deadlines.
        package var deadlineSweepInterval: TimeAmount = .milliseconds(100)
        package var metrics: APNsClientMetrics
        /// Which handler drives the connection: this one, or ``NGHTTP2ConnectionHandler``.
        package var engine: APNsHTTP2Engine = .nio

        package init(
            authority: String,
            stateMachine: APNsConnectionStateMachine<APNsResponseHandler>.Configuration = .init(),
            pingInterval: TimeAmount = .seconds(60),
            metrics: APNsClientMetrics,
            engine: APNsHTTP2Engine = .nio
        ) {
            self.authority = authority
            self.stateMachine = stateMachine
            self.pingInterval = pingInterval
            self.metrics = metrics
            self.engine = engine
        }
    }

    /// Told to the pool, on the event loop.
    package struct Events {
        package var limitChanged: (Int) -> Void
        package var closed: () -> Void

        package init(limitChanged: @escaping (Int) -> Void, closed: @escaping () -> Void) {
            self.limitChanged = limitChanged
            self.closed = closed
        }
    }

    private typealias StateMachine = APNsConnectionStateMachine<APNsResponseHandler>

    private let configuration: Configuration
    private var events: Events?
    private let logger: Logger
    private let readyPromise: EventLoopPromise<Void>
    private var context: ChannelHandlerContext?
    private var state: StateMachine
    private var headerEncoder: APNsRequestHeaderEncoder
    private var flushScheduled = false
    private var pingTask: Scheduled<Void>?
    private var deadlineSweep: Scheduled<Void>?
    private var inboundWindow = InboundConnectionWindow()

    package init(configuration: Configuration, readyPromise: EventLoopPromise<Void>, logger: Logger) {
        self.configuration = configuration
        self.readyPromise = readyPromise
        self.logger = logger
        self.state = StateMachine(configuration: configuration.stateMachine)
        self.headerEncoder = APNsRequestHeaderEncoder(authority: configuration.authority)
    }

    package func setEvents(_ events: Events) {
        self.events = events
        events.limitChanged(self.state.poolAttached())
    }

    // MARK: Requests

    /// Writes the request on a new stream; the stream is reset, and the completion handler told
    /// interrupted, if no answer has come by `deadline`.
    package func send(
        _ request: APNsRequest,
        authorization: String?,
        deadline: NIODeadline,
        completion: @escaping APNsResponseHandler
    ) {
        guard let context else {
            completion(.failure(.unprocessed("the connection is closing")))
            return
        }
        let streamID: HTTP2StreamID
        switch self.state.start(completion, deadline: deadline) {
        case .fail(let completion, let failure):
            completion(.failure(failure))
            return
        case .write(let id):
            streamID = id
        }
        if self.deadlineSweep == nil {
            self.scheduleDeadlineSweep(context: context)
        }
        let headers = self.headerEncoder.headers(for: request, authorization: authorization)
        let hasBody = request.payload.readableBytes > 0
        context.write(
            self.wrapOutboundOut(
                HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: !hasBody)))
            ),
            promise: nil
        )
        if hasBody {
            context.write(
                self.wrapOutboundOut(
                    HTTP2Frame(
                        streamID: streamID,
                        payload: .data(.init(data: .byteBuffer(request.payload), endStream: true))
                    )
                ),
                promise: nil
            )
        }
        self.scheduleFlush(context: context)
        self.logger.trace("request sent", metadata: ["stream": "\(streamID)", "apns-id": "\(request.apnsID)"])
        self.afterEvent(context: context)  // the last stream id may have started a drain
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

    package func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    package func channelActive(context: ChannelHandlerContext) {
        self.schedulePing(context: context)
        context.fireChannelActive()
    }

    package func channelInactive(context: ChannelHandlerContext) {
        let wasSetUp = self.state.isSetUp
        self.pingTask?.cancel()
        self.pingTask = nil
        self.deadlineSweep?.cancel()
        self.deadlineSweep = nil
        if !wasSetUp {
            self.readyPromise.fail(APNsStreamFailure.unprocessed("the connection closed before HTTP/2 was set up"))
        }
        self.complete(self.state.closed())
        self.afterEvent(context: context)
        self.events?.closed()
        self.events = nil
        context.fireChannelInactive()
    }

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted(let negotiated) = tlsEvent {
            if negotiated != "h2" {
                self.logger.error(
                    "the upstream did not agree to HTTP/2 (ALPN h2)",
                    metadata: ["alpn": "\(negotiated ?? "none")"]
                )
                context.close(promise: nil)
            }
        } else if let closed = event as? StreamClosedEvent {
            if let completion = self.state.streamClosed(closed.streamID, reason: closed.reason, now: .now()) {
                self.complete(completion)
                self.afterEvent(context: context)
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.logger.debug("upstream connection error", metadata: ["error": "\(error)"])
        if error is NIOHTTP2Errors.StreamClosed || error is NIOHTTP2Errors.NoSuchStream {
            return  // a late frame for a finished stream: harmless
        }
        context.close(promise: nil)
    }

    package func channelReadComplete(context: ChannelHandlerContext) {
        let completions = self.state.readComplete()
        if !completions.isEmpty {
            self.complete(completions)
            self.afterEvent(context: context)
        }
        context.fireChannelReadComplete()
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = self.unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            let status = headers.headers.first(name: ":status").flatMap { Int($0) }
            let completion = self.state.headersReceived(
                on: frame.streamID,
                status: status,
                apnsID: status == nil
                    ? nil : headers.headers.first(name: "apns-id") ?? headers.headers.first(name: "apns-request-id"),
                uniqueID: status == nil ? nil : headers.headers.first(name: "apns-unique-id"),
                channelID: status == nil ? nil : headers.headers.first(name: "apns-channel-id"),
                endStream: headers.endStream
            )
            if let completion {
                self.complete(completion)
                self.afterEvent(context: context)
            }
        case .data(let data):
            if let update = self.inboundWindow.windowUpdate(afterReceiving: data) {
                context.write(self.wrapOutboundOut(update), promise: nil)
                self.scheduleFlush(context: context)
            }
            if case .byteBuffer(let bytes) = data.data,
                let completion = self.state.dataReceived(on: frame.streamID, bytes, endStream: data.endStream)
            {
                self.complete(completion)
                self.afterEvent(context: context)
            }
        case .settings(.settings(let settings)):
            let maximum = settings.last { $0.parameter == .maxConcurrentStreams }.map(\.value)
            if let maximum {
                self.logger.debug("upstream stream limit", metadata: ["max_concurrent_streams": "\(maximum)"])
            }
            if self.state.settingsReceived(maximumConcurrentStreams: maximum) {
                self.readyPromise.succeed()
            }
            self.afterEvent(context: context)
        case .ping(_, ack: true):
            self.state.pingAcknowledged()
        case .goAway(let lastStreamID, let errorCode, let debugData):
            let reason = debugData.flatMap(APNsErrorBody.parse)?.reason
            self.configuration.metrics.goAwayReceived()
            self.logger.warning(
                "upstream sent GOAWAY",
                metadata: [
                    "reason": "\(reason?.rawValue ?? "none")", "error_code": "\(errorCode)",
                    "last_stream_id": "\(lastStreamID)", "open_streams": "\(self.state.openStreams)",
                ]
            )
            self.complete(self.state.goAwayReceived(lastStreamID: lastStreamID))
            self.afterEvent(context: context)
        default:
            break
        }
    }

    // MARK: Executing the state machine's actions

    private func complete(_ completion: StateMachine.Completion) {
        completion.request(completion.result)
    }

    private func complete(_ completions: [StateMachine.Completion]) {
        for completion in completions {
            self.complete(completion)
        }
    }

    /// After an event that may change the stream limit or finish a drain: does what the
    /// machine's ``APNsConnectionStateMachine/settled()`` answers.
    private func afterEvent(context: ChannelHandlerContext) {
        let action = self.state.settled()
        if let limit = action.limitChanged {
            self.events?.limitChanged(limit)
        }
        if action.close {
            if let reason = action.replacing {
                self.logger.warning("replacing the upstream connection", metadata: ["why": "\(reason)"])
            }
            context.close(promise: nil)
        }
    }

    // MARK: Timers

    /// One timer per connection while streams are open, rather than one per request.
    private func scheduleDeadlineSweep(context: ChannelHandlerContext) {
        self.deadlineSweep = context.eventLoop.assumeIsolated().scheduleTask(
            in: self.configuration.deadlineSweepInterval
        ) {
            self.sweepExpiredStreams()
        }
    }

    /// Resets the streams whose deadline has passed (RST_STREAM CANCEL) and fails them as
    /// interrupted: the server may have processed them, so the client retries only within its
    /// budget, like any other interrupted stream.
    private func sweepExpiredStreams() {
        self.deadlineSweep = nil
        guard let context, self.state.phase != .closed else { return }
        let expired = self.state.deadlinesPassed(now: .now())
        if !expired.isEmpty {
            self.logger.warning(
                "upstream did not answer in time; resetting the streams",
                metadata: ["streams": "\(expired.count)", "open_streams": "\(self.state.openStreams + expired.count)"]
            )
            self.configuration.metrics.streamsTimedOut(expired.count)
            for (streamID, completion) in expired {
                context.write(
                    self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.cancel))),
                    promise: nil
                )
                self.complete(completion)
            }
            context.flush()
            self.afterEvent(context: context)
        }
        if self.state.openStreams > 0, self.state.phase != .closed {
            self.scheduleDeadlineSweep(context: context)
        }
    }

    private func schedulePing(context: ChannelHandlerContext) {
        self.pingTask = context.eventLoop.assumeIsolated().scheduleTask(in: self.configuration.pingInterval) {
            self.pingDue()
        }
    }

    private func pingDue() {
        guard let context else { return }
        switch self.state.pingDue() {
        case .none:
            return
        case .close:
            self.logger.warning(
                "upstream did not answer a PING; replacing the connection",
                metadata: [
                    "interval": "\(self.configuration.pingInterval)", "open_streams": "\(self.state.openStreams)",
                ]
            )
            context.close(promise: nil)
        case .send(let data):
            self.schedulePing(context: context)
            context.writeAndFlush(
                self.wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .ping(data, ack: false))),
                promise: nil
            )
        }
    }
}

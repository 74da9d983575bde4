import Logging
import NIOCore
import NIOHTTP2

/// The engine-independent half of one connection to APNs: the state machine, its timers (PING,
/// deadlines), the one flush per event-loop tick, the pool's events and the ready promise. Both
/// engine handlers feed it the same events (SETTINGS, an answer's headers and data, a stream
/// closed, GOAWAY, a PING acknowledged, the end of a read, the close) and it executes the one
/// ``APNsConnectionStateMachine/Action`` each answers, in ``execute(_:)``, through the engine's
/// ``APNsConnectionTransport``. The handlers only translate frames to events and actions to
/// frames.
///
/// **Reads are batches.** What the events of one read decide (the requests they end, the new
/// stream limit, the close) runs at the read's end (``endBatch()``), on both engines. A
/// completion may send the next request on this connection or close it, and libnghttp2 must not
/// be re-entered from its own callbacks (its writes are batches too: sending can close
/// streams); NIOHTTP2 hands over one frame at a time, so without the batch a completion closing
/// the connection would fail answers that had already arrived in the same read.
///
/// Not thread-safe: it lives on the connection's event loop, owned by its handler.
package final class APNsConnectionCore<Transport: APNsConnectionTransport>: APNsConnectionDriver {
    package typealias StateMachine = APNsConnectionStateMachine<any APNsStreamOwner>

    /// The pool's number for this connection, given to each request's owner with its end.
    package let connectionID: Int
    private let configuration: APNsConnectionConfiguration
    /// The connection's logger (its `upstream_connection` number), for the engine's lines too.
    package let logger: Logger
    private let readyPromise: EventLoopPromise<Void>
    private weak var transport: Transport?
    private var eventLoop: (any EventLoop)?
    private var events: APNsConnectionEvents?
    // The machine and its buffers skip the runtime's exclusivity checks: every access is one
    // call into the pure machine or a swap, on the event loop, never overlapping another
    // (measured: docs/performance-log.md, "Exclusivity checks off for the machines' state").
    @exclusivity(unchecked) private var state: StateMachine
    /// Requests the current batch ended, run at its end; kept between batches.
    @exclusivity(unchecked) private var completions: [StateMachine.Completion] = []
    /// The other buffer ``runPending()`` swaps with ``completions``, so running a batch
    /// allocates nothing (a copy of the array, then emptying it, allocated once per batch).
    @exclusivity(unchecked) private var running: [StateMachine.Completion] = []
    /// What the current batch's events decided, beyond the completions.
    @exclusivity(unchecked) private var pending = StateMachine.Action()
    private var inBatch = false
    /// Whether the ready promise has succeeded: a connection that closes before is failed.
    private var isReady = false
    private var flushScheduled = false
    private var pingTask: Scheduled<Void>?
    private var deadlineSweep: Scheduled<Void>?

    package init(
        connectionID: Int,
        configuration: APNsConnectionConfiguration,
        readyPromise: EventLoopPromise<Void>,
        logger: Logger
    ) {
        self.connectionID = connectionID
        self.configuration = configuration
        self.readyPromise = readyPromise
        self.logger = logger
        self.state = StateMachine(configuration: configuration.stateMachine)
    }

    /// The open streams, for the engine's log lines.
    package var openStreams: Int { self.state.openStreams }

    /// The handler was added to its channel.
    package func attach(_ transport: Transport, eventLoop: any EventLoop) {
        self.transport = transport
        self.eventLoop = eventLoop
    }

    package func setEvents(_ events: APNsConnectionEvents) {
        self.events = events
        events.limitChanged(self.state.poolAttached())
    }

    // MARK: Events from the engine

    /// The channel is active: the PING timer starts.
    package func channelActive() {
        self.schedulePing()
    }

    /// TLS finished: anything but HTTP/2 closes the connection.
    package func handshakeCompleted(negotiatedProtocol: String?) {
        guard negotiatedProtocol != "h2" else { return }
        self.logger.error(
            "the upstream did not agree to HTTP/2 (ALPN h2)",
            metadata: ["alpn": "\(negotiatedProtocol ?? "none")"]
        )
        self.transport?.close()
    }

    /// A request from the pool; its stream is reset, and its owner told interrupted, if no
    /// answer has come by `deadline`.
    package func send(
        _ request: APNsRequest,
        authorization: String?,
        deadline: NIODeadline,
        owner: any APNsStreamOwner
    ) {
        guard let transport = self.transport else {
            owner.streamEnded(.failure(.unprocessed("the connection is closing")), onConnection: self.connectionID)
            return
        }
        var action = self.state.start(owner, deadline: deadline, completing: &self.completions)
        if case .write(let streamID) = action.streams {
            action.streams = .none
            if transport.writeRequest(request, authorization: authorization, on: streamID) {
                self.scheduleFlush()
                if self.deadlineSweep == nil {
                    self.scheduleDeadlineSweep()
                }
                self.logger.trace("request sent", metadata: ["stream": "\(streamID)", "apns-id": "\(request.apnsID)"])
            } else {
                // The engine numbers streams as the machine does; anything else is a failure to
                // write (or a bug), and the request was not sent.
                self.logger.error("the HTTP/2 engine did not take the request", metadata: ["stream": "\(streamID)"])
                action.merge(
                    self.state.streamClosed(
                        streamID,
                        reason: .refusedStream,
                        now: .now(),
                        completing: &self.completions
                    )
                )
            }
        }
        self.handle(action)
    }

    /// The server's SETTINGS frame.
    package func settingsReceived(maximumConcurrentStreams: Int?) {
        if let maximumConcurrentStreams {
            self.logger.debug(
                "upstream stream limit",
                metadata: ["max_concurrent_streams": "\(maximumConcurrentStreams)"]
            )
        }
        self.handle(self.state.settingsReceived(maximumConcurrentStreams: maximumConcurrentStreams))
    }

    /// An answer's header block, its fields already picked out.
    package func headersReceived(
        on streamID: HTTP2StreamID,
        status: Int?,
        apnsID: String?,
        uniqueID: String?,
        channelID: String?,
        endStream: Bool
    ) {
        self.handle(
            self.state.headersReceived(
                on: streamID,
                status: status,
                apnsID: apnsID,
                uniqueID: uniqueID,
                channelID: channelID,
                endStream: endStream,
                completing: &self.completions
            )
        )
    }

    /// Body bytes of an answer, or (empty, `endStream`) the end of its body.
    package func dataReceived(on streamID: HTTP2StreamID, _ bytes: ByteBuffer, endStream: Bool) {
        self.handle(self.state.dataReceived(on: streamID, bytes, endStream: endStream, completing: &self.completions))
    }

    /// A stream ended; `reason` is `nil` for a normal end, else the reset's error code.
    package func streamClosed(_ streamID: HTTP2StreamID, reason: HTTP2ErrorCode?) {
        self.handle(self.state.streamClosed(streamID, reason: reason, now: .now(), completing: &self.completions))
    }

    /// GOAWAY, with the reason APNs put in its debug data, if any.
    package func goAwayReceived(lastStreamID: HTTP2StreamID, errorCode: HTTP2ErrorCode, debugData: ByteBuffer?) {
        let reason = debugData.flatMap(APNsErrorBody.parse)?.reason
        self.configuration.metrics.goAwayReceived()
        self.logger.warning(
            "upstream sent GOAWAY",
            metadata: [
                "reason": "\(reason?.rawValue ?? "none")", "error_code": "\(errorCode)",
                "last_stream_id": "\(lastStreamID)", "open_streams": "\(self.state.openStreams)",
            ]
        )
        self.handle(self.state.goAwayReceived(lastStreamID: lastStreamID, completing: &self.completions))
    }

    package func pingAcknowledged() {
        self.handle(self.state.pingAcknowledged())
    }

    /// The engine cannot go on, or its HTTP/2 session is over: the machine decides the close
    /// (``APNsConnectionStateMachine/engineStopped(_:)``).
    package func engineStopped(_ reason: StateMachine.CloseReason) {
        self.handle(self.state.engineStopped(reason))
    }

    /// The engine starts handing over what it read (or, for libnghttp2, what sending decided):
    /// the events until ``endBatch()`` are one batch. `false` if a batch is already open (the
    /// NIOHTTP2 engine opens one at a read's first frame and ends it at the read's end).
    @discardableResult
    package func beginBatch() -> Bool {
        guard !self.inBatch else { return false }
        self.inBatch = true
        return true
    }

    /// The batch is over: what its events decided runs now.
    package func endBatch() {
        guard self.inBatch else { return }
        self.inBatch = false
        self.pending.merge(self.state.readComplete(completing: &self.completions))
        self.runPending()
    }

    /// Flushes once this event-loop tick is over (a WINDOW_UPDATE, a request).
    package func scheduleFlush() {
        guard !self.flushScheduled, let eventLoop else { return }
        self.flushScheduled = true
        eventLoop.assumeIsolated().execute {
            self.flushScheduled = false
            self.transport?.flush()
        }
    }

    /// The channel went inactive: every request still open fails, the pool is told.
    package func channelInactive() {
        self.pingTask?.cancel()
        self.pingTask = nil
        self.deadlineSweep?.cancel()
        self.deadlineSweep = nil
        self.inBatch = false
        self.pending.merge(self.state.closed(completing: &self.completions))
        self.runPending()
        if !self.isReady {
            self.readyPromise.fail(APNsStreamFailure.unprocessed("the connection closed before HTTP/2 was set up"))
        }
        self.events?.closed()
        self.events = nil
    }

    // MARK: Executing

    /// One event's action: at once, or at the end of the batch it belongs to.
    private func handle(_ action: StateMachine.Action) {
        if self.inBatch {
            self.pending.merge(action)
        } else if !action.isEmpty || !self.completions.isEmpty {
            self.pending.merge(action)
            self.runPending()
        }
    }

    private func runPending() {
        var action = StateMachine.Action()
        swap(&action, &self.pending)  // taken, not copied
        if let limit = action.newLimit {
            // Told before the answers that came with it free their streams: a authentication-token
            // connection's first 200 raises its one stream to the server's limit, and the pool
            // must not see it full at one stream then (it would open a connection for that
            // moment; docs/upstream.md#connections).
            action.newLimit = nil
            self.events?.limitChanged(limit)
        }
        if !self.completions.isEmpty {
            // A completion may end more requests (a send that fails, a close): those go to the
            // emptied buffer and run in a nested call.
            var ended: [StateMachine.Completion] = []
            swap(&ended, &self.running)
            swap(&ended, &self.completions)
            for completion in ended {
                completion.request.streamEnded(completion.result, onConnection: self.connectionID)
            }
            ended.removeAll(keepingCapacity: true)
            self.running = ended
        }
        if !action.isEmpty {
            self.execute(action)
        }
    }

    /// The one place a connection's decisions become I/O, for both engines. The new limit was
    /// told first, in ``runPending()``.
    private func execute(_ action: StateMachine.Action) {
        switch action.streams {
        case .none:
            break
        case .write:
            preconditionFailure("a new stream is written by send(_:authorization:deadline:owner:), at once")
        case .reset(let streamIDs):
            for streamID in streamIDs {
                self.transport?.resetStream(streamID)
            }
            self.scheduleFlush()
        }
        switch action.connection {
        case .none:
            break
        case .ready:
            self.isReady = true
            self.readyPromise.succeed()
        case .ping(let ping):
            self.transport?.writePing(ping)
            self.transport?.flush()
        case .close(let reason):
            switch reason {
            case .drained(let why) where reason.isOwnDecision:
                self.logger.warning("replacing the upstream connection", metadata: ["why": "\(why)"])
            case .pingUnanswered:
                self.logger.warning(
                    "upstream did not answer a PING; replacing the connection",
                    metadata: [
                        "interval": "\(self.configuration.pingInterval)", "open_streams": "\(self.state.openStreams)",
                    ]
                )
            case .protocolError(let error):
                self.logger.warning(
                    "the upstream broke the HTTP/2 protocol; closing the connection",
                    metadata: ["error": "\(error)"]
                )
            case .sendFailed(let error):
                self.logger.error(
                    "the HTTP/2 engine could not send; closing the connection",
                    metadata: ["error": "\(error)"]
                )
            case .drained, .engineFinished:
                break
            }
            self.transport?.close()
        }
    }

    // MARK: Timers

    /// One timer per connection while streams are open, rather than one per request.
    private func scheduleDeadlineSweep() {
        guard let eventLoop else { return }
        self.deadlineSweep = eventLoop.assumeIsolated().scheduleTask(in: self.configuration.deadlineSweepInterval) {
            self.sweepExpiredStreams()
        }
    }

    /// Resets the streams whose deadline has passed and fails them as interrupted: the server
    /// may have processed them, so the client retries only within its budget, like any other
    /// interrupted stream.
    private func sweepExpiredStreams() {
        self.deadlineSweep = nil
        guard self.state.phase != .closed else { return }
        let action = self.state.deadlinesPassed(now: .now(), completing: &self.completions)
        if case .reset(let streamIDs) = action.streams {
            self.logger.warning(
                "upstream did not answer in time; resetting the streams",
                metadata: [
                    "streams": "\(streamIDs.count)",
                    "open_streams": "\(self.state.openStreams + streamIDs.count)",
                ]
            )
            self.configuration.metrics.streamsTimedOut(streamIDs.count)
        }
        self.handle(action)
        if self.state.openStreams > 0, self.state.phase != .closed {
            self.scheduleDeadlineSweep()
        }
    }

    private func schedulePing() {
        guard let eventLoop else { return }
        self.pingTask = eventLoop.assumeIsolated().scheduleTask(in: self.configuration.pingInterval) {
            self.pingDue()
        }
    }

    private func pingDue() {
        let action = self.state.pingDue()
        if case .ping = action.connection {
            self.schedulePing()
        }
        self.handle(action)
    }
}

/// What ``APNsConnectionCore`` asks of an HTTP/2 engine: the frames to write, the flush, the
/// close. Each engine's handler is one (``APNsConnectionHandler`` over NIOHTTP2,
/// ``NGHTTP2ConnectionHandler`` over libnghttp2); the core calls it on the connection's event
/// loop, never while the engine is inside its own parser.
package protocol APNsConnectionTransport: AnyObject {
    /// Queues the request on `streamID` (HEADERS, and DATA for a body); `false` if the engine
    /// could not take it (the core then fails it as refused by the stream).
    func writeRequest(_ request: APNsRequest, authorization: String?, on streamID: HTTP2StreamID) -> Bool
    /// Queues RST_STREAM CANCEL for a stream whose deadline passed.
    func resetStream(_ streamID: HTTP2StreamID)
    /// Queues a PING.
    func writePing(_ data: HTTP2PingData)
    /// Writes out and flushes what was queued.
    func flush()
    /// Closes the connection, after writing what is queued.
    func close()
}

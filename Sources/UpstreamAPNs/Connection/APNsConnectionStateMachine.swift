import NIOCore
import NIOHTTP2

/// The state of one HTTP/2 connection to APNs, without I/O.
///
/// ``APNsConnectionHandler`` feeds it what happens on the connection (a request to start, the
/// frames of an answer, a stream closed, GOAWAY, a PING due, the connection closed) and executes
/// what it returns: write a stream, complete or fail a request, reset a stream, send a PING,
/// close. Time is an input of the events that need it. `Request` is whatever the handler
/// completes (a promise in production, a number in the tests).
///
/// ```
///   starting ── first SETTINGS ──► active ── GOAWAY / too many refused streams /
///      │                             │       stream ids nearly used up ──► draining
///      │                             │                                        │ last open
///      │                             │                                        ▼ stream ends
///      └──────── connection closed ──┴──────────────────────────────────────► closed
/// ```
///
/// - **Stream credits** (``streamLimit``): 0 unless active; 1 until the first 200 on a
///   provider-token connection (Apple asks for that); then the server's
///   `MAX_CONCURRENT_STREAMS`, capped by our own bound (NIOHTTP2 would buffer streams above the
///   server's limit without a bound of its own).
/// - **GOAWAY**: streams above its last stream id were not processed and fail as
///   ``APNsStreamFailure/Kind/unprocessed`` (safe to send again at once); the others are answered
///   before the connection closes.
/// - **PING health**: a PING still unanswered when the next is due means the connection is dead.
/// - **REFUSED_STREAM**: more than the limit within the window and the connection drains.
/// - **Deadlines**: a stream not answered by its deadline is reset and fails as interrupted.
package struct APNsConnectionStateMachine<Request> {
    package struct Configuration: Sendable, Hashable {
        /// Our own bound on open streams, whatever the server allows.
        package var maximumStreams: Int = 1000
        package var oneStreamUntilFirstSuccess: Bool = true
        /// More `REFUSED_STREAM` resets than this within `refusedStreamWindow` and the
        /// connection drains.
        package var refusedStreamLimit: Int = 100
        package var refusedStreamWindow: TimeAmount = .seconds(30)
        /// Answer bodies (error JSON, channel management answers) are cut to this length.
        package var maximumResponseBodyLength: Int = 2048
        /// Stream ids are 31 bits; this many before the end, the connection hands over.
        package var streamIDReserve: Int32 = 4096

        package init() {}
    }

    package enum Phase: Hashable, Sendable {
        case starting
        case active
        case draining
        case closed
    }

    /// A request that is over: answered, or failed.
    package struct Completion {
        package var request: Request
        package var result: Result<APNsResponse, APNsStreamFailure>
    }

    /// What to do with a request the pool hands over.
    package enum StartAction {
        /// Write it on this new stream.
        case write(HTTP2StreamID)
        /// Do not write it: the connection takes no new streams.
        case fail(Request, APNsStreamFailure)
    }

    /// What the connection does once an event is handled; both engines' handlers execute it
    /// the same way (``settled()``).
    package struct ConnectionAction: Hashable, Sendable {
        /// Tell the pool this stream limit: it changed since the last one told.
        package var limitChanged: Int?
        /// Close the connection: it drained (nothing open, nothing new taken).
        package var close = false
        /// Why it is being replaced, when it closes for a reason of its own (not the server's
        /// GOAWAY): worth a warning.
        package var replacing: String?

        package init(limitChanged: Int? = nil, close: Bool = false, replacing: String? = nil) {
            self.limitChanged = limitChanged
            self.close = close
            self.replacing = replacing
        }
    }

    package enum PingAction: Hashable, Sendable {
        case send(HTTP2PingData)
        /// The last PING was not answered: close the connection.
        case close
        case none
    }

    private struct OpenStream {
        var request: Request
        var deadline: NIODeadline
        var status: Int?
        var apnsID: String?
        var uniqueID: String?
        var channelID: String?
        var body = ByteBuffer()
    }

    private let configuration: Configuration
    package private(set) var phase: Phase = .starting
    /// Why the connection drains, when it does.
    package private(set) var drainReason: String?
    private var streams: [HTTP2StreamID: OpenStream] = [:]
    private var nextStreamID = HTTP2StreamID(1)
    private var goAwayLastStreamID: HTTP2StreamID?
    private var serverMaximumStreams: Int?
    private var hasSucceeded = false
    private var hasSettings = false
    private var pingOutstanding = false
    private var pingCounter: UInt64 = 0
    private var refusedTimes: [NIODeadline] = []
    /// Streams NIOHTTP2 reported closed before their last frame was handed over.
    private var closedDuringRead: [HTTP2StreamID] = []
    /// The stream limit last told to the pool.
    private var reportedLimit = 0

    package init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// The streams the pool may have open now.
    package var streamLimit: Int {
        guard self.phase == .active else { return 0 }
        if self.configuration.oneStreamUntilFirstSuccess && !self.hasSucceeded { return 1 }
        return min(self.serverMaximumStreams ?? self.configuration.maximumStreams, self.configuration.maximumStreams)
    }

    package var openStreams: Int { self.streams.count }

    /// Whether the server's first SETTINGS has arrived (HTTP/2 is set up).
    package var isSetUp: Bool { self.hasSettings }

    /// Draining with nothing left open: the handler closes the connection.
    package var shouldClose: Bool {
        self.phase == .draining && self.streams.isEmpty
    }

    /// The pool subscribed to the connection's events: the stream limit to tell it now.
    package mutating func poolAttached() -> Int {
        self.reportedLimit = self.streamLimit
        return self.reportedLimit
    }

    /// After an event (or a read's events): a stream limit the pool has not been told yet, and
    /// whether the connection closes now.
    package mutating func settled() -> ConnectionAction {
        var action = ConnectionAction()
        let limit = self.streamLimit
        if limit != self.reportedLimit {
            self.reportedLimit = limit
            action.limitChanged = limit
        }
        if self.shouldClose {
            action.close = true
            if let reason = self.drainReason, reason != "GOAWAY" {
                action.replacing = reason
            }
        }
        return action
    }

    // MARK: Set-up and health

    /// The server's SETTINGS; returns `true` for the first (HTTP/2 is set up).
    package mutating func settingsReceived(maximumConcurrentStreams: Int?) -> Bool {
        if let maximumConcurrentStreams { self.serverMaximumStreams = maximumConcurrentStreams }
        guard !self.hasSettings else { return false }
        self.hasSettings = true
        if self.phase == .starting { self.phase = .active }
        return true
    }

    package mutating func pingDue() -> PingAction {
        guard self.phase != .closed else { return .none }
        if self.pingOutstanding { return .close }
        self.pingOutstanding = true
        self.pingCounter &+= 1
        return .send(HTTP2PingData(withInteger: self.pingCounter))
    }

    package mutating func pingAcknowledged() {
        self.pingOutstanding = false
    }

    // MARK: Requests

    /// A request to write, answered by `deadline` or reset.
    package mutating func start(_ request: Request, deadline: NIODeadline) -> StartAction {
        guard self.phase == .active else {
            return .fail(request, .unprocessed("the connection is closing"))
        }
        let streamID = self.nextStreamID
        if Int32(streamID) > Int32.max - self.configuration.streamIDReserve {
            self.drain("stream ids nearly exhausted")
        } else {
            self.nextStreamID = HTTP2StreamID(Int32(streamID) + 2)
        }
        self.streams[streamID] = OpenStream(request: request, deadline: deadline)
        return .write(streamID)
    }

    /// A HEADERS frame of an answer.
    package mutating func headersReceived(
        on streamID: HTTP2StreamID,
        status: Int?,
        apnsID: String?,
        uniqueID: String?,
        channelID: String? = nil,
        endStream: Bool
    ) -> Completion? {
        guard self.streams[streamID] != nil else { return nil }
        if let status {
            self.streams[streamID]!.status = status
            self.streams[streamID]!.apnsID = apnsID
            self.streams[streamID]!.uniqueID = uniqueID
            self.streams[streamID]!.channelID = channelID
        }
        return endStream ? self.complete(streamID) : nil
    }

    /// A DATA frame of an answer (an error body); kept up to the maximum body length.
    package mutating func dataReceived(on streamID: HTTP2StreamID, _ bytes: ByteBuffer, endStream: Bool) -> Completion?
    {
        guard self.streams[streamID] != nil else { return nil }
        var bytes = bytes
        let room = self.configuration.maximumResponseBodyLength - self.streams[streamID]!.body.readableBytes
        if room > 0, let slice = bytes.readSlice(length: min(room, bytes.readableBytes)) {
            self.streams[streamID]!.body.writeImmutableBuffer(slice)
        }
        return endStream ? self.complete(streamID) : nil
    }

    /// NIOHTTP2 reports a stream closed; `reason` is `nil` for a normal end.
    package mutating func streamClosed(
        _ streamID: HTTP2StreamID,
        reason: HTTP2ErrorCode?,
        now: NIODeadline
    ) -> Completion? {
        guard let stream = self.streams[streamID] else { return nil }
        guard let reason else {
            // Closed normally: NIOHTTP2 may report the close before it hands over the frame
            // that carried END_STREAM (the body of an error answer). That frame arrives in the
            // same read, so the stream is completed at the end of the read at the latest.
            self.closedDuringRead.append(streamID)
            return nil
        }
        self.streams.removeValue(forKey: streamID)
        let failure: APNsStreamFailure
        if let lastStreamID = self.goAwayLastStreamID, streamID > lastStreamID {
            failure = .unprocessed("above the GOAWAY's last stream id")
        } else if reason == .refusedStream {
            failure = .unprocessed("REFUSED_STREAM")
            self.noteRefusedStream(now: now)
        } else if reason == .protocolError {
            failure = .refused("stream reset (PROTOCOL_ERROR)")
        } else {
            failure = .interrupted("stream reset (\(reason))")
        }
        return Completion(request: stream.request, result: .failure(failure))
    }

    /// The end of a read: streams closed during it without their last frame are completed.
    package mutating func readComplete() -> [Completion] {
        guard !self.closedDuringRead.isEmpty else { return [] }
        let closed = self.closedDuringRead
        self.closedDuringRead.removeAll(keepingCapacity: true)
        return closed.compactMap { self.complete($0) }
    }

    /// GOAWAY: no new streams; those above `lastStreamID` fail as unprocessed.
    package mutating func goAwayReceived(lastStreamID: HTTP2StreamID) -> [Completion] {
        self.goAwayLastStreamID = self.goAwayLastStreamID.map { min($0, lastStreamID) } ?? lastStreamID
        if self.phase != .closed {
            self.drain("GOAWAY")
        }
        let unprocessed = self.streams.keys.filter { $0 > lastStreamID }
        return unprocessed.compactMap { streamID in
            self.streams.removeValue(forKey: streamID).map {
                Completion(request: $0.request, result: .failure(.unprocessed("above the GOAWAY's last stream id")))
            }
        }
    }

    /// Streams whose deadline has passed: the handler resets each (RST_STREAM CANCEL) and fails
    /// its request as interrupted (the server may have processed it).
    package mutating func deadlinesPassed(now: NIODeadline) -> [(streamID: HTTP2StreamID, completion: Completion)] {
        guard self.phase != .closed else { return [] }
        var expired: [(streamID: HTTP2StreamID, completion: Completion)] = []
        for (streamID, stream) in self.streams where stream.deadline <= now {
            expired.append(
                (
                    streamID,
                    Completion(
                        request: stream.request,
                        result: .failure(.interrupted("no answer before the request's deadline; stream reset"))
                    )
                )
            )
        }
        for (streamID, _) in expired {
            self.streams.removeValue(forKey: streamID)
        }
        return expired
    }

    /// The connection closed: every open stream fails (unprocessed above a GOAWAY's last stream
    /// id, interrupted otherwise).
    package mutating func closed() -> [Completion] {
        self.phase = .closed
        let streams = self.streams
        self.streams.removeAll()
        self.closedDuringRead.removeAll()
        return streams.map { streamID, stream in
            let failure: APNsStreamFailure =
                if let lastStreamID = self.goAwayLastStreamID, streamID > lastStreamID {
                    .unprocessed("above the GOAWAY's last stream id")
                } else {
                    .interrupted("the connection closed")
                }
            return Completion(request: stream.request, result: .failure(failure))
        }
    }

    /// Takes no new streams; the connection closes once its open streams have finished.
    package mutating func drain(_ why: String) {
        guard self.phase == .starting || self.phase == .active else { return }
        self.phase = .draining
        self.drainReason = why
    }

    // MARK: Private

    private mutating func complete(_ streamID: HTTP2StreamID) -> Completion? {
        guard let stream = self.streams.removeValue(forKey: streamID) else { return nil }
        guard let status = stream.status else {
            return Completion(
                request: stream.request,
                result: .failure(.interrupted("the stream ended without a status"))
            )
        }
        var response = APNsResponse(
            status: status,
            apnsID: stream.apnsID,
            uniqueID: stream.uniqueID,
            channelID: stream.channelID
        )
        if stream.body.readableBytes > 0 {
            if status < 300 {
                response.body = stream.body  // a channel management answer
            } else if let body = APNsErrorBody.parse(stream.body) {
                response.reason = body.reason
                response.timestamp = body.timestamp
            }
        }
        if (200..<300).contains(status) {
            self.hasSucceeded = true
        }
        return Completion(request: stream.request, result: .success(response))
    }

    private mutating func noteRefusedStream(now: NIODeadline) {
        let windowStart = now - self.configuration.refusedStreamWindow
        self.refusedTimes.removeAll { $0 < windowStart }
        self.refusedTimes.append(now)
        if self.refusedTimes.count > self.configuration.refusedStreamLimit {
            self.drain("\(self.refusedTimes.count) streams refused within \(self.configuration.refusedStreamWindow)")
        }
    }
}

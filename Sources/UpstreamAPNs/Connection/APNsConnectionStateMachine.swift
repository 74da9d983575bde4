import NIOCore
import NIOHTTP2

// Over 400 lines, on purpose: the whole life of one HTTP/2 connection to APNs (streams,
// answers, GOAWAY, PINGs, limits, the close) as one state machine both engines drive, so that
// the engines cannot disagree about what an event means (EngineParityTests).

/// The state of one HTTP/2 connection to APNs, without I/O.
///
/// ``APNsConnectionCore`` feeds it what happens on the connection (a request to start, the
/// frames of an answer, a stream closed, GOAWAY, a PING due, the connection closed), the same
/// events from either engine. Every event answers one ``Action``, by what it acts on: the
/// streams (write the new one, reset expired ones), the connection (it is set up, a PING, the
/// close and why) and the stream limit the pool is told. Each event also appends the requests
/// it ended to the caller's `completing` list, which the core runs after the read: nothing is
/// polled afterwards, and no allocation is made for an answer. Time is an input of the events
/// that need it. `Request` is whatever the core completes (a closure in production, a number
/// in the tests).
///
/// ```
///   starting ── first SETTINGS ──► active ── GOAWAY / too many refused streams /
///      │                             │       stream ids nearly used up ──► draining(why)
///      │                             │                                        │ last open
///      │                             │ PING unanswered, engine stopped        ▼ stream ends
///      │                             └──────────────────────────────────► closing(why)
///      │                                                                      │ channel
///      └──────── connection closed (from any phase) ──────────────────────────▼ inactive
///                                                                          closed
/// ```
///
/// - **Stream credits** (``streamLimit``): 0 unless active; 1 until the first 200 on a
///   authentication-token connection (Apple asks for that); then the server's
///   `MAX_CONCURRENT_STREAMS`, capped by our own bound (NIOHTTP2 would buffer streams above the
///   server's limit without a bound of its own).
/// - **GOAWAY**: streams above its last stream id were not processed and fail as
///   ``APNsStreamFailure/Kind/unprocessed`` (safe to send again at once); the others are answered
///   before the connection closes.
/// - **PING health**: a PING still unanswered when the next is due means the connection is dead.
/// - **REFUSED_STREAM**: more than the limit within the window and the connection drains.
/// - **Deadlines**: a stream not answered by its deadline is reset and fails as interrupted.
/// - **Impossible events trap**, as in NIOHTTP2's own state machines: the connection closing
///   twice (a channel goes inactive once). Frames after the close are possible (a handler before
///   ours may close the channel in the middle of a read and the rest of the read still arrives):
///   they find no stream and change nothing.
package struct APNsConnectionStateMachine<Request> {
    /// What the client's configuration sets (``APNsClient/Configuration``, where the defaults
    /// live), and the machine's own constants.
    package struct Configuration: Sendable, Hashable {
        /// Our own bound on open streams, whatever the server allows.
        package var maximumStreams: Int
        /// Apple's rule for authentication-token connections.
        package var oneStreamUntilFirstSuccess: Bool
        /// More `REFUSED_STREAM` resets than this within `refusedStreamWindow` and the
        /// connection drains.
        package var refusedStreamLimit: Int
        package var refusedStreamWindow: TimeAmount = .seconds(30)
        /// Answer bodies (error JSON, channel management answers) are cut to this length.
        package var maximumResponseBodyLength: Int
        /// Stream ids are 31 bits; this many before the end, the connection hands over.
        package var streamIDReserve: Int32 = 4096

        package init(_ client: APNsClient.Configuration = .init(), usesAuthenticationTokens: Bool = true) {
            self.maximumStreams = client.maximumStreamsPerConnection
            self.oneStreamUntilFirstSuccess = usesAuthenticationTokens
            self.refusedStreamLimit = client.refusedStreamLimit
            self.maximumResponseBodyLength = client.maximumResponseBodyLength
        }
    }

    /// Where the connection is in its life (what each phase means for a new request:
    /// ``start(_:deadline:completing:)``).
    package enum Phase: Hashable, Sendable {
        /// Waiting for the server's first SETTINGS: no streams yet.
        case starting
        /// Taking new streams, up to ``streamLimit``.
        case active
        /// Taking no new streams; asks for the close once the open ones have ended.
        case draining(DrainReason)
        /// The close has been asked for (an action said so, once); the open streams may still
        /// be answered until the channel goes inactive.
        case closing(CloseReason)
        /// The channel went inactive: every stream has ended.
        case closed
    }

    /// A request that is over: answered, or failed.
    package struct Completion {
        package var request: Request
        package var result: Result<APNsResponse, APNsStreamFailure>
    }

    /// Why a connection stops taking new streams.
    package enum DrainReason: Hashable, Sendable, CustomStringConvertible {
        /// The server's GOAWAY.
        case goAway
        /// Stream ids are 31 bits; the connection hands over before they run out.
        case streamIDsNearlyExhausted
        /// More `REFUSED_STREAM` resets than the limit within the window.
        case streamsRefused(count: Int, window: TimeAmount)

        package var description: String {
            switch self {
            case .goAway: "GOAWAY"
            case .streamIDsNearlyExhausted: "stream ids nearly exhausted"
            case .streamsRefused(let count, let window): "\(count) streams refused within \(window)"
            }
        }
    }

    /// Why the connection closes.
    package enum CloseReason: Hashable, Sendable {
        /// It drained: nothing open, nothing new taken.
        case drained(DrainReason)
        /// A PING was still unanswered when the next was due: the connection is dead.
        case pingUnanswered
        /// The engine could not parse what the server sent (the libnghttp2 engine's
        /// `mem_recv`), or could not produce what to send (`mem_send`): the description is the
        /// engine's.
        case protocolError(String)
        case sendFailed(String)
        /// The engine has nothing more to read or write (its GOAWAY is out, or both sides
        /// said goodbye).
        case engineFinished

        /// Whether the connection is replaced for a reason of its own (worth a warning), not
        /// because the server said goodbye or the HTTP/2 session ended.
        package var isOwnDecision: Bool {
            switch self {
            case .drained(.goAway), .engineFinished: false
            case .drained, .pingUnanswered, .protocolError, .sendFailed: true
            }
        }
    }

    /// What the connection does after an event, by what it acts on, as async-http-client's pool
    /// machine answers a request action and a connection action. ``APNsConnectionCore``
    /// executes it the same way for both engines. Empty for most events.
    package struct Action: Hashable, Sendable {
        /// What happens to streams.
        package enum Streams: Hashable, Sendable {
            case none
            /// A started request goes on this new stream (only ``start(_:deadline:completing:)``
            /// answers it, and the core writes it at once).
            case write(HTTP2StreamID)
            /// Reset these (RST_STREAM CANCEL): their deadline passed.
            case reset([HTTP2StreamID])
        }

        /// What happens to the connection.
        package enum Connection: Hashable, Sendable {
            case none
            /// The first SETTINGS arrived: HTTP/2 is set up.
            case ready
            /// Send a PING with this payload.
            case ping(HTTP2PingData)
            /// Close, after writing what is queued (asked once).
            case close(CloseReason)
        }

        package var streams: Streams
        package var connection: Connection
        /// The stream limit to tell the pool: it changed since the last one told.
        package var newLimit: Int?

        package init(streams: Streams = .none, connection: Connection = .none, newLimit: Int? = nil) {
            self.streams = streams
            self.connection = connection
            self.newLimit = newLimit
        }

        /// Whether there is nothing to do.
        package var isEmpty: Bool {
            if case .none = self.streams, case .none = self.connection, self.newLimit == nil { return true }
            return false
        }

        /// Adds a later event's action to this one: the events of one read run together
        /// (``APNsConnectionCore``'s batches). Per axis: resets add up; a close, once asked,
        /// stays (a set-up the close follows in the same read is then never announced, and
        /// the core fails the connection's set-up when it closes); the later limit wins.
        package mutating func merge(_ later: Action) {
            switch (self.streams, later.streams) {
            case (_, .none):
                break
            case (.none, _):
                self.streams = later.streams
            case (.reset(let earlier), .reset(let more)):
                self.streams = .reset(earlier + more)
            case (.write, _), (_, .write):
                preconditionFailure("a new stream is written at once, never merged")
            }
            switch (self.connection, later.connection) {
            case (_, .none), (.close, _):
                break
            default:
                self.connection = later.connection
            }
            if let limit = later.newLimit { self.newLimit = limit }
        }
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
    private var streams = StreamTable<HTTP2StreamID, OpenStream>()
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
        guard case .active = self.phase else { return 0 }
        if self.configuration.oneStreamUntilFirstSuccess && !self.hasSucceeded { return 1 }
        return min(self.serverMaximumStreams ?? self.configuration.maximumStreams, self.configuration.maximumStreams)
    }

    package var openStreams: Int { self.streams.count }

    /// The pool subscribed to the connection's events: the stream limit to tell it now.
    package mutating func poolAttached() -> Int {
        self.reportedLimit = self.streamLimit
        return self.reportedLimit
    }

    // MARK: Set-up and health

    /// The server's SETTINGS; the first sets HTTP/2 up (``Action/Connection/ready``).
    package mutating func settingsReceived(maximumConcurrentStreams: Int?) -> Action {
        switch self.phase {
        case .starting:
            self.phase = .active
        case .active, .draining:
            // A GOAWAY may come before the first SETTINGS: the connection is set up, draining.
            break
        case .closing, .closed:
            // Frames after the close was asked: a connection that closes before it was set up
            // is never announced (the core fails its set-up when it closes).
            return Action()
        }
        if let maximumConcurrentStreams { self.serverMaximumStreams = maximumConcurrentStreams }
        guard !self.hasSettings else { return self.settled(Action()) }
        self.hasSettings = true
        return self.settled(Action(connection: .ready))
    }

    /// The PING timer: send one, or close if the last was never answered.
    package mutating func pingDue() -> Action {
        switch self.phase {
        case .starting, .active, .draining:
            guard !self.pingOutstanding else { return self.closing(.pingUnanswered) }
            self.pingOutstanding = true
            self.pingCounter &+= 1
            return Action(connection: .ping(HTTP2PingData(withInteger: self.pingCounter)))
        case .closing, .closed:
            // The timer fired while the close is under way.
            return Action()
        }
    }

    /// The PING was answered: the connection is alive.
    package mutating func pingAcknowledged() -> Action {
        self.pingOutstanding = false
        return Action()
    }

    /// The engine cannot go on (``CloseReason/protocolError(_:)``,
    /// ``CloseReason/sendFailed(_:)``), or its HTTP/2 session is over
    /// (``CloseReason/engineFinished``): close, once.
    package mutating func engineStopped(_ reason: CloseReason) -> Action {
        self.closing(reason)
    }

    // MARK: Requests

    /// A request to write, answered by `deadline` or reset: ``Action/Streams/write(_:)`` names
    /// its stream. Only an active connection takes one; otherwise the request fails unprocessed
    /// at once (before the first SETTINGS, while draining or closing, after the close).
    package mutating func start(
        _ request: Request,
        deadline: NIODeadline,
        completing completions: inout [Completion]
    ) -> Action {
        guard case .active = self.phase else {
            completions.append(
                Completion(request: request, result: .failure(.unprocessed("the connection is closing")))
            )
            return Action()
        }
        let streamID = self.nextStreamID
        if Int32(streamID) > Int32.max - self.configuration.streamIDReserve {
            self.drain(.streamIDsNearlyExhausted)
        } else {
            self.nextStreamID = HTTP2StreamID(Int32(streamID) + 2)
        }
        self.streams.append(streamID, OpenStream(request: request, deadline: deadline))
        return self.settled(Action(streams: .write(streamID)))
    }

    /// A HEADERS frame of an answer.
    package mutating func headersReceived(
        on streamID: HTTP2StreamID,
        status: Int?,
        apnsID: String?,
        uniqueID: String?,
        channelID: String? = nil,
        endStream: Bool,
        completing completions: inout [Completion]
    ) -> Action {
        // One lookup: the stream is then changed and removed at its index.
        guard let index = self.streams.index(of: streamID) else { return Action() }
        if let status {
            self.streams[index].status = status
            self.streams[index].apnsID = apnsID
            self.streams[index].uniqueID = uniqueID
            self.streams[index].channelID = channelID
        }
        guard endStream else { return Action() }
        return self.complete(at: index, into: &completions)
    }

    /// A DATA frame of an answer (an error body); kept up to the maximum body length.
    package mutating func dataReceived(
        on streamID: HTTP2StreamID,
        _ bytes: ByteBuffer,
        endStream: Bool,
        completing completions: inout [Completion]
    ) -> Action {
        guard let index = self.streams.index(of: streamID) else { return Action() }
        var bytes = bytes
        let room = self.configuration.maximumResponseBodyLength - self.streams[index].body.readableBytes
        // An empty DATA frame that only ends the stream (nghttpd's answer with an empty body)
        // writes nothing: writing an empty slice into the empty body allocated its storage.
        if room > 0, bytes.readableBytes > 0, let slice = bytes.readSlice(length: min(room, bytes.readableBytes)) {
            self.streams[index].body.writeImmutableBuffer(slice)
        }
        guard endStream else { return Action() }
        return self.complete(at: index, into: &completions)
    }

    /// The engine reports a stream closed; `reason` is `nil` for a normal end. `now` is read only
    /// for a refused stream (most closes are of streams already answered, and need no clock).
    package mutating func streamClosed(
        _ streamID: HTTP2StreamID,
        reason: HTTP2ErrorCode?,
        now: @autoclosure () -> NIODeadline,
        completing completions: inout [Completion]
    ) -> Action {
        // An index, not a copy of the stream: an answered stream is gone already, and a copy
        // retains its request and strings only to drop them.
        guard let index = self.streams.index(of: streamID) else { return Action() }
        guard let reason else {
            // Closed normally: NIOHTTP2 may report the close before it hands over the frame
            // that carried END_STREAM (the body of an error answer). That frame arrives in the
            // same read, so the stream is completed at the end of the read at the latest.
            self.closedDuringRead.append(streamID)
            return Action()
        }
        let stream = self.streams.remove(at: index)
        let failure: APNsStreamFailure
        if let lastStreamID = self.goAwayLastStreamID, streamID > lastStreamID {
            failure = .unprocessed("above the GOAWAY's last stream id")
        } else if reason == .refusedStream {
            failure = .unprocessed("REFUSED_STREAM")
            self.noteRefusedStream(now: now())
        } else if reason == .protocolError {
            failure = .refused("stream reset (PROTOCOL_ERROR)")
        } else {
            failure = .interrupted("stream reset (\(reason))")
        }
        completions.append(Completion(request: stream.request, result: .failure(failure)))
        return self.settled(Action())
    }

    /// The end of a read: streams closed during it without their last frame are completed.
    package mutating func readComplete(completing completions: inout [Completion]) -> Action {
        guard !self.closedDuringRead.isEmpty else { return Action() }
        var action = Action()
        for streamID in self.closedDuringRead {
            action.merge(self.complete(streamID, into: &completions))
        }
        self.closedDuringRead.removeAll(keepingCapacity: true)
        return action
    }

    /// GOAWAY: no new streams; those above `lastStreamID` fail as unprocessed.
    package mutating func goAwayReceived(
        lastStreamID: HTTP2StreamID,
        completing completions: inout [Completion]
    ) -> Action {
        guard self.phase != .closed else { return Action() }
        self.goAwayLastStreamID = self.goAwayLastStreamID.map { min($0, lastStreamID) } ?? lastStreamID
        self.drain(.goAway)
        for (_, stream) in self.streams.removeAll(where: { streamID, _ in streamID > lastStreamID }) {
            completions.append(
                Completion(
                    request: stream.request,
                    result: .failure(.unprocessed("above the GOAWAY's last stream id"))
                )
            )
        }
        return self.settled(Action())
    }

    /// The deadline timer: streams whose deadline has passed are reset (``Action/resets``,
    /// RST_STREAM CANCEL) and fail as interrupted (the server may have processed them).
    package mutating func deadlinesPassed(now: NIODeadline, completing completions: inout [Completion]) -> Action {
        guard self.phase != .closed else { return Action() }
        var resets: [HTTP2StreamID] = []
        for (streamID, stream) in self.streams.removeAll(where: { _, stream in stream.deadline <= now }) {
            resets.append(streamID)
            completions.append(
                Completion(
                    request: stream.request,
                    result: .failure(.interrupted("no answer before the request's deadline; stream reset"))
                )
            )
        }
        // Collected, then set once: `resets` is computed, so appending through it copied the
        // array for each stream.
        return resets.isEmpty ? Action() : self.settled(Action(streams: .reset(resets)))
    }

    /// The connection closed: every open stream fails (unprocessed above a GOAWAY's last stream
    /// id, interrupted otherwise). Once only.
    package mutating func closed(completing completions: inout [Completion]) -> Action {
        Swift.precondition(self.phase != .closed, "the connection closed twice")
        self.phase = .closed
        for (streamID, stream) in self.streams.removeAll() {
            let failure: APNsStreamFailure =
                if let lastStreamID = self.goAwayLastStreamID, streamID > lastStreamID {
                    .unprocessed("above the GOAWAY's last stream id")
                } else {
                    .interrupted("the connection closed")
                }
            completions.append(Completion(request: stream.request, result: .failure(failure)))
        }
        self.closedDuringRead.removeAll()
        return self.settled(Action())
    }

    /// Takes no new streams; the connection closes once its open streams have finished. Part
    /// of the events that call it, which answer the action (``settled(_:)`` asks the close).
    private mutating func drain(_ reason: DrainReason) {
        switch self.phase {
        case .starting, .active:
            self.phase = .draining(reason)
        case .draining, .closing, .closed:
            // Already taking no new streams: the first reason stays.
            break
        }
    }

    // MARK: Private

    /// `action`, plus, once drained, the close, and a stream limit the pool has not been told.
    private mutating func settled(_ action: consuming Action) -> Action {
        var action = action
        if case .draining(let reason) = self.phase, self.streams.isEmpty {
            self.phase = .closing(.drained(reason))
            action.connection = .close(.drained(reason))
        }
        let limit = self.streamLimit
        if limit != self.reportedLimit {
            self.reportedLimit = limit
            action.newLimit = limit
        }
        return action
    }

    /// Asks for the close, once: the connection takes no new streams from here on.
    private mutating func closing(_ reason: CloseReason) -> Action {
        switch self.phase {
        case .starting, .active, .draining:
            self.phase = .closing(reason)
            return self.settled(Action(connection: .close(reason)))
        case .closing, .closed:
            // The close is asked once.
            return Action()
        }
    }

    private mutating func complete(_ streamID: HTTP2StreamID, into completions: inout [Completion]) -> Action {
        guard let index = self.streams.index(of: streamID) else { return Action() }
        return self.complete(at: index, into: &completions)
    }

    private mutating func complete(
        at index: StreamTable<HTTP2StreamID, OpenStream>.Index,
        into completions: inout [Completion]
    ) -> Action {
        let stream = self.streams.remove(at: index)
        guard let status = stream.status else {
            completions.append(
                Completion(request: stream.request, result: .failure(.interrupted("the stream ended without a status")))
            )
            return self.settled(Action())
        }
        var body: ByteBuffer?
        var error: APNsErrorBody?
        if stream.body.readableBytes > 0 {
            if status < 300 {
                body = stream.body  // a channel management answer
            } else {
                error = APNsErrorBody.parse(stream.body)
            }
        }
        let response = APNsResponse(
            status: status,
            apnsID: stream.apnsID,
            uniqueID: stream.uniqueID,
            reason: error?.reason,
            timestamp: error?.timestamp,
            channelID: stream.channelID,
            body: body
        )
        if (200..<300).contains(status) {
            self.hasSucceeded = true
        }
        completions.append(Completion(request: stream.request, result: .success(response)))
        return self.settled(Action())
    }

    private mutating func noteRefusedStream(now: NIODeadline) {
        let windowStart = now - self.configuration.refusedStreamWindow
        self.refusedTimes.removeAll { $0 < windowStart }
        self.refusedTimes.append(now)
        if self.refusedTimes.count > self.configuration.refusedStreamLimit {
            self.drain(.streamsRefused(count: self.refusedTimes.count, window: self.configuration.refusedStreamWindow))
        }
    }
}

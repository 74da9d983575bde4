import NIOCore
import NIOHTTP2
import Testing
import UpstreamAPNs

/// One HTTP/2 connection's state, driven without a socket: requests are numbers, time is a
/// value the test moves.
@Suite("Connection state machine")
struct APNsConnectionStateMachineTests {
    typealias Machine = APNsConnectionStateMachine<Int>

    static let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    static func machine(
        oneStreamFirst: Bool = false,
        maximumStreams: Int = 1000,
        refusedStreamLimit: Int = 100
    ) -> Machine {
        var configuration = Machine.Configuration()
        configuration.oneStreamUntilFirstSuccess = oneStreamFirst
        configuration.maximumStreams = maximumStreams
        configuration.refusedStreamLimit = refusedStreamLimit
        return Machine(configuration: configuration)
    }

    /// Starts `request` and returns its stream id (`nil`: it failed at once).
    static func write(
        _ machine: inout Machine,
        _ request: Int,
        deadline: NIODeadline = start + .seconds(10)
    ) -> HTTP2StreamID? {
        var completions: [Machine.Completion] = []
        guard case .write(let streamID) = machine.start(request, deadline: deadline, completing: &completions).streams
        else { return nil }
        return streamID
    }

    /// Runs one event and returns the one request it ended, if exactly one.
    static func ended(_ event: (inout [Machine.Completion]) -> Machine.Action) -> Machine.Completion? {
        var completions: [Machine.Completion] = []
        _ = event(&completions)
        return completions.count == 1 ? completions[0] : nil
    }

    /// Runs one event and returns every request it ended.
    static func allEnded(_ event: (inout [Machine.Completion]) -> Machine.Action) -> [Machine.Completion] {
        var completions: [Machine.Completion] = []
        _ = event(&completions)
        return completions
    }

    static func answer(_ machine: inout Machine, _ streamID: HTTP2StreamID, status: Int = 200) -> Machine.Completion? {
        Self.ended {
            machine.headersReceived(
                on: streamID,
                status: status,
                apnsID: "id",
                uniqueID: nil,
                endStream: true,
                completing: &$0
            )
        }
    }

    @Test(
        "No stream credit before SETTINGS; one until the first 200 on a token connection; then the server's limit under our cap"
    )
    func streamCredits() throws {
        var machine = Self.machine(oneStreamFirst: true, maximumStreams: 500)
        #expect(machine.streamLimit == 0)
        var failed: [Machine.Completion] = []
        #expect(machine.start(1, deadline: Self.start, completing: &failed).streams == .none)
        if case .failure(let failure) = failed.first?.result, failed.count == 1 {
            #expect(failed[0].request == 1 && failure.kind == .unprocessed)
        } else {
            Issue.record("a request before SETTINGS must not be written, and fails at once")
        }
        #expect(machine.settingsReceived(maximumConcurrentStreams: 1000).connection == .ready)
        #expect(
            machine.settingsReceived(maximumConcurrentStreams: 800).connection == .none,
            "only the first SETTINGS sets the connection up"
        )
        #expect(machine.streamLimit == 1)
        let streamWritten = Self.write(&machine, 2)
        let stream = try #require(streamWritten)
        let refused = Self.answer(&machine, stream, status: 400)
        #expect(refused?.request == 2)
        #expect(machine.streamLimit == 1, "an error answer is not the first success")
        let secondWritten = Self.write(&machine, 3)
        let second = try #require(secondWritten)
        #expect(second == HTTP2StreamID(3), "client streams are odd and increasing")
        _ = Self.answer(&machine, second)
        #expect(machine.streamLimit == 500, "the server's 800 capped by our own 500")
        _ = machine.settingsReceived(maximumConcurrentStreams: 10)
        #expect(machine.streamLimit == 10, "a lower limit applies at once")
    }

    @Test("An error answer's body gives the reason and timestamp, kept to the maximum length")
    func errorBody() throws {
        var machine = Self.machine()
        _ = machine.settingsReceived(maximumConcurrentStreams: nil)
        let streamWritten = Self.write(&machine, 1)
        let stream = try #require(streamWritten)
        let headers = Self.allEnded {
            machine.headersReceived(
                on: stream,
                status: 410,
                apnsID: "a",
                uniqueID: "u",
                endStream: false,
                completing: &$0
            )
        }
        #expect(headers.isEmpty)
        let data = Self.ended {
            machine.dataReceived(
                on: stream,
                ByteBuffer(string: #"{"reason":"Unregistered","timestamp":1700000000000}"#),
                endStream: true,
                completing: &$0
            )
        }
        let completion = try #require(data)
        let response = try completion.result.get()
        #expect(
            response
                == APNsResponse(
                    status: 410,
                    apnsID: "a",
                    uniqueID: "u",
                    reason: .unregistered,
                    timestamp: 1_700_000_000_000
                )
        )
        #expect(machine.openStreams == 0)
    }

    @Test("A stream NIOHTTP2 closes before its last frame is completed at the end of the read")
    func closedBeforeLastFrame() throws {
        var machine = Self.machine()
        _ = machine.settingsReceived(maximumConcurrentStreams: nil)
        let streamWritten = Self.write(&machine, 7)
        let stream = try #require(streamWritten)
        _ = Self.allEnded {
            machine.headersReceived(
                on: stream,
                status: 400,
                apnsID: nil,
                uniqueID: nil,
                endStream: false,
                completing: &$0
            )
        }
        let closed = Self.allEnded { machine.streamClosed(stream, reason: nil, now: Self.start, completing: &$0) }
        #expect(closed.isEmpty)
        let completions = Self.allEnded { machine.readComplete(completing: &$0) }
        #expect(completions.count == 1 && completions.first?.request == 7)
        #expect((try? completions.first?.result.get())?.status == 400)
    }

    @Test(
        "GOAWAY: streams above its last stream id fail as unprocessed, the rest are answered, then the connection closes"
    )
    func goAway() throws {
        var machine = Self.machine()
        _ = machine.settingsReceived(maximumConcurrentStreams: nil)
        let streams = (1...4).compactMap { Self.write(&machine, $0) }
        #expect(streams.count == 4)
        let failed = Self.allEnded { machine.goAwayReceived(lastStreamID: streams[1], completing: &$0) }
        #expect(Set(failed.map(\.request)) == [3, 4])
        #expect(
            failed.allSatisfy {
                if case .failure(let failure) = $0.result { failure.kind == .unprocessed } else { false }
            }
        )
        #expect(machine.phase == .draining(.goAway) && machine.streamLimit == 0)
        #expect(Self.write(&machine, 5) == nil, "a draining connection takes no new stream")
        var completions: [Machine.Completion] = []
        let first = machine.headersReceived(
            on: streams[0],
            status: 200,
            apnsID: nil,
            uniqueID: nil,
            endStream: true,
            completing: &completions
        )
        #expect(first.isEmpty, "one stream is still being answered")
        #expect(machine.phase == .draining(.goAway))
        let last = machine.headersReceived(
            on: streams[1],
            status: 200,
            apnsID: nil,
            uniqueID: nil,
            endStream: true,
            completing: &completions
        )
        #expect(last == .init(connection: .close(.drained(.goAway))))
        #expect(machine.phase == .closing(.drained(.goAway)))
    }

    @Test("A connection lost: open streams fail as interrupted, those above a GOAWAY's last stream id as unprocessed")
    func connectionLost() throws {
        var machine = Self.machine()
        _ = machine.settingsReceived(maximumConcurrentStreams: nil)
        let streams = (1...3).compactMap { Self.write(&machine, $0) }
        _ = Self.allEnded { machine.goAwayReceived(lastStreamID: streams[2], completing: &$0) }  // all processed
        let completions = Self.allEnded { machine.closed(completing: &$0) }
        #expect(completions.count == 3)
        #expect(
            completions.allSatisfy {
                if case .failure(let failure) = $0.result { failure.kind == .interrupted } else { false }
            }
        )
        #expect(machine.phase == .closed && machine.streamLimit == 0)
    }

    @Test("A PING still unanswered when the next is due closes the connection")
    func pingHealth() throws {
        var machine = Self.machine()
        _ = machine.settingsReceived(maximumConcurrentStreams: nil)
        #expect(machine.pingDue().connection == .ping(HTTP2PingData(withInteger: 1)), "the first PING is sent")
        #expect(machine.pingAcknowledged().isEmpty)
        #expect(machine.pingDue().connection == .ping(HTTP2PingData(withInteger: 2)), "answered: the next is sent")
        #expect(
            machine.pingDue() == .init(connection: .close(.pingUnanswered), newLimit: 0),
            "the pool stops sending on it at once"
        )
        #expect(machine.phase == .closing(.pingUnanswered))
        #expect(Self.write(&machine, 1) == nil, "a closing connection takes no new stream")
        #expect(machine.pingDue().isEmpty, "the close is under way")
        _ = Self.allEnded { machine.closed(completing: &$0) }
        #expect(machine.pingDue().isEmpty)
    }

    @Test("An engine that cannot go on, or whose session is over, closes the connection once")
    func engineStopped() throws {
        var machine = Self.machine()
        _ = machine.settingsReceived(maximumConcurrentStreams: nil)
        #expect(
            machine.engineStopped(.protocolError("bad frame"))
                == .init(connection: .close(.protocolError("bad frame")), newLimit: 0)
        )
        #expect(machine.engineStopped(.engineFinished).isEmpty, "the close is asked once")
        _ = Self.allEnded { machine.closed(completing: &$0) }
        #expect(machine.engineStopped(.sendFailed("out of memory")).isEmpty, "closed")
        #expect(Machine.CloseReason.engineFinished.isOwnDecision == false)
        #expect(Machine.CloseReason.protocolError("x").isOwnDecision)
    }

    @Test("More refused streams than the limit within 30 s drain the connection; spread over time they do not")
    func refusedStreams() throws {
        var machine = Self.machine(refusedStreamLimit: 3)
        _ = machine.settingsReceived(maximumConcurrentStreams: nil)
        var now = Self.start
        // One refusal every 20 s: never more than 2 in a 30 s window.
        for request in 1...5 {
            guard let stream = Self.write(&machine, request) else {
                Issue.record("request \(request) was not written")
                return
            }
            let completion = Self.ended {
                machine.streamClosed(stream, reason: .refusedStream, now: now, completing: &$0)
            }
            #expect(
                { if case .failure(let failure) = completion?.result { failure.kind == .unprocessed } else { false } }()
            )
            now = now + .seconds(20)
        }
        #expect(machine.phase == .active)
        // With the one at +80 s still in the window, three more make four within 30 s.
        for request in 6...8 {
            guard let stream = Self.write(&machine, request) else {
                Issue.record("request \(request) was not written")
                return
            }
            _ = Self.allEnded { machine.streamClosed(stream, reason: .refusedStream, now: now, completing: &$0) }
        }
        #expect(machine.phase == .closing(.drained(.streamsRefused(count: 4, window: .seconds(30)))))
    }

    @Test("Streams past their deadline are reported once, as interrupted; the others stay")
    func deadlines() throws {
        var machine = Self.machine()
        _ = machine.settingsReceived(maximumConcurrentStreams: nil)
        let earlyWritten = Self.write(&machine, 1, deadline: Self.start + .seconds(1))
        let early = try #require(earlyWritten)
        _ = Self.write(&machine, 2, deadline: Self.start + .seconds(5))
        var completions: [Machine.Completion] = []
        #expect(machine.deadlinesPassed(now: Self.start + .milliseconds(999), completing: &completions).isEmpty)
        #expect(completions.isEmpty)
        let expired = machine.deadlinesPassed(now: Self.start + .seconds(2), completing: &completions)
        #expect(expired.streams == .reset([early]), "its stream is reset")
        #expect(completions.map(\.request) == [1])
        #expect(
            completions.first.map {
                if case .failure(let failure) = $0.result { failure.kind == .interrupted } else { false }
            } == true
        )
        #expect(
            machine.deadlinesPassed(now: Self.start + .seconds(2), completing: &completions).streams == .none,
            "reported once"
        )
        #expect(completions.count == 1)
        #expect(machine.openStreams == 1)
    }

    @Test("Other resets fail the stream as interrupted: APNs may have processed it")
    func resets() throws {
        var machine = Self.machine()
        _ = machine.settingsReceived(maximumConcurrentStreams: nil)
        let streamWritten = Self.write(&machine, 1)
        let stream = try #require(streamWritten)
        let completion = Self.ended {
            machine.streamClosed(stream, reason: .internalError, now: Self.start, completing: &$0)
        }
        #expect(
            { if case .failure(let failure) = completion?.result { failure.kind == .interrupted } else { false } }()
        )
        #expect(machine.phase == .active)
    }

    @Test("A reset with PROTOCOL_ERROR blames the request: it fails as refused, and the connection stays")
    func protocolErrorReset() throws {
        var machine = Self.machine()
        _ = machine.settingsReceived(maximumConcurrentStreams: nil)
        let streamWritten = Self.write(&machine, 1)
        let stream = try #require(streamWritten)
        let completion = Self.ended {
            machine.streamClosed(stream, reason: .protocolError, now: Self.start, completing: &$0)
        }
        #expect({ if case .failure(let failure) = completion?.result { failure.kind == .refused } else { false } }())
        #expect(machine.phase == .active)
    }

    @Test("Stream ids nearly used up: the last one is written, then the connection drains and hands over")
    func streamIDsRunOut() throws {
        var configuration = Machine.Configuration()
        configuration.streamIDReserve = Int32.max - 4  // ids above 4 count as nearly used up
        var machine = Machine(configuration: configuration)
        _ = machine.settingsReceived(maximumConcurrentStreams: nil)
        #expect(Self.write(&machine, 1) == HTTP2StreamID(1))
        #expect(Self.write(&machine, 2) == HTTP2StreamID(3))
        #expect(machine.phase == .active)
        #expect(Self.write(&machine, 3) == HTTP2StreamID(5))
        #expect(machine.phase == .draining(.streamIDsNearlyExhausted))
        #expect(Self.write(&machine, 4) == nil)
    }

    @Test(
        "Each event's action: a new stream limit is told to the pool once; a drained connection closes once, its reason an own decision unless the server's GOAWAY drained it"
    )
    func actions() throws {
        var configuration = Machine.Configuration()
        configuration.oneStreamUntilFirstSuccess = true
        configuration.maximumStreams = 500
        configuration.streamIDReserve = Int32.max - 2  // stream 3 is past the reserve: its start drains
        var machine = Machine(configuration: configuration)
        #expect(machine.poolAttached() == 0, "not set up yet")
        #expect(
            machine.settingsReceived(maximumConcurrentStreams: 100) == .init(connection: .ready, newLimit: 1),
            "one stream until the first success"
        )
        #expect(machine.settingsReceived(maximumConcurrentStreams: 100).isEmpty, "told once")
        var completions: [Machine.Completion] = []
        let first = machine.start(1, deadline: Self.start, completing: &completions)
        #expect(first == .init(streams: .write(1)))
        let answered = machine.headersReceived(
            on: 1,
            status: 200,
            apnsID: nil,
            uniqueID: nil,
            endStream: true,
            completing: &completions
        )
        #expect(answered == .init(newLimit: 100), "the first success lifts the limit")

        var drained: [Machine.Completion] = []
        let draining = machine.start(2, deadline: Self.start, completing: &drained)
        #expect(
            draining == .init(streams: .write(3), newLimit: 0),
            "the last stream id before the reserve: no new streams"
        )
        let open = HTTP2StreamID(3)
        let last = machine.headersReceived(
            on: open,
            status: 200,
            apnsID: nil,
            uniqueID: nil,
            endStream: true,
            completing: &completions
        )
        #expect(last == .init(connection: .close(.drained(.streamIDsNearlyExhausted))))
        #expect(Machine.CloseReason.drained(.streamIDsNearlyExhausted).isOwnDecision, "worth a warning")
        #expect(completions.count == 2)
        #expect(machine.closed(completing: &completions).isEmpty, "the close was asked once")

        var goingAway = Self.machine()
        _ = goingAway.settingsReceived(maximumConcurrentStreams: 10)
        _ = goingAway.poolAttached()
        let action = goingAway.goAwayReceived(lastStreamID: 0, completing: &completions)
        #expect(action == .init(connection: .close(.drained(.goAway)), newLimit: 0))
        #expect(!Machine.CloseReason.drained(.goAway).isOwnDecision, "the server's GOAWAY: no warning of our own")
    }

    @Test("The actions of one read add up per axis: resets add up, a close stays, the later limit wins")
    func merge() throws {
        var batch = Machine.Action(connection: .ready, newLimit: 1)
        batch.merge(.init(newLimit: 100))
        #expect(batch == .init(connection: .ready, newLimit: 100))
        batch.merge(.init(connection: .close(.drained(.goAway)), newLimit: 0))
        batch.merge(.init(connection: .close(.engineFinished)))
        #expect(batch == .init(connection: .close(.drained(.goAway)), newLimit: 0), "the first close stays")

        var resets = Machine.Action(streams: .reset([1]))
        resets.merge(.init(streams: .reset([3, 5])))
        resets.merge(.init())
        #expect(resets == .init(streams: .reset([1, 3, 5])))
    }

    @Test("A connection whose close was asked before its first SETTINGS is never announced as set up")
    func closedBeforeSetUp() throws {
        var machine = Self.machine()
        var completions: [Machine.Completion] = []
        #expect(
            machine.goAwayReceived(lastStreamID: 0, completing: &completions)
                == .init(connection: .close(.drained(.goAway)))
        )
        #expect(machine.settingsReceived(maximumConcurrentStreams: 10).isEmpty)
        #expect(machine.streamLimit == 0)
    }
}

import BridgeCore
import LegacyProtocol
import NIOCore
import Synchronization
import Testing

@Suite("Provider connection state machine")
struct ProviderConnectionStateMachineTests {
    static let tenant = ProviderSessionStateMachineTests.tenant

    static func bytes(_ identifiers: ClosedRange<UInt32>, tokenLength: Int = 32) -> ByteBuffer {
        var buffer = ByteBuffer()
        for identifier in identifiers {
            buffer.writeNotificationFrame(ProviderSessionStateMachineTests.frame(identifier, tokenLength: tokenLength))
        }
        return buffer
    }

    static func machine(maximumInFlight: Int = 256) -> ProviderConnectionStateMachine {
        var configuration = ProviderSessionStateMachine.Configuration()
        configuration.maximumInFlight = maximumInFlight
        return ProviderConnectionStateMachine(sessionConfiguration: configuration)
    }

    /// A machine past its handshake and store check.
    static func openMachine(maximumInFlight: Int = 256) -> ProviderConnectionStateMachine {
        var machine = Self.machine(maximumInFlight: maximumInFlight)
        let handshake = machine.handshakeCompleted(tenant: Self.tenant)
        #expect(handshake == .prepare(Self.tenant))
        let ready = machine.storeReady()
        #expect(ready == .decode)
        return machine
    }

    /// Every step until the machine stops decoding.
    static func drain(_ machine: inout ProviderConnectionStateMachine) -> [ProviderConnectionStateMachine.FrameStep] {
        var steps: [ProviderConnectionStateMachine.FrameStep] = []
        while let step = machine.nextFrameStep() { steps.append(step) }
        return steps
    }

    static func forwardedSequences(
        _ steps: [ProviderConnectionStateMachine.FrameStep]
    ) -> [ProviderSessionStateMachine.Sequence] {
        steps.compactMap {
            if case .forward(let sequence, _, _) = $0 { return sequence }
            return nil
        }
    }

    @Test("Before the handshake nothing is decoded; a shutdown then closes, and a late handshake changes nothing")
    func handshake() {
        var machine = Self.machine()
        let decodesNow = machine.bytesReceived(Self.bytes(1...1))
        #expect(decodesNow == .none)
        let step = machine.nextFrameStep()
        #expect(step == nil)
        let reads1 = machine.readRequested()
        #expect(reads1 == .read, "the handshake needs bytes")
        let endOfInput = machine.inputClosed()
        #expect(endOfInput == .close(.inputEnded), "a client that leaves during its handshake")
        let shutdown = machine.shutdownRequested()
        #expect(shutdown == .close(.beforeForwarding))
        _ = machine.channelInactive()
        let reads2 = machine.readRequested()
        #expect(reads2 == .none, "closed")
        let handshake = machine.handshakeCompleted(tenant: Self.tenant)
        #expect(handshake == .none)
        #expect(machine.tenant == nil)
    }

    @Test("Bytes that arrive while the store is asked about the tenant wait, then are decoded in order")
    func preparingBuffers() {
        var machine = Self.machine()
        let handshake = machine.handshakeCompleted(tenant: Self.tenant)
        #expect(handshake == .prepare(Self.tenant))
        #expect(machine.tenant == Self.tenant)
        let decodesNow1 = machine.bytesReceived(Self.bytes(1...2))
        #expect(decodesNow1 == .none, "not decoded while preparing")
        let step = machine.nextFrameStep()
        #expect(step == nil)
        let decodesNow2 = machine.bytesReceived(Self.bytes(3...3))
        #expect(decodesNow2 == .none)
        let ready1 = machine.storeReady()
        #expect(ready1 == .decode)
        let steps = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps) == [0, 1, 2])
        #expect(machine.bufferedBytes == 0)
    }

    @Test("A frame split across reads is decoded when its last byte arrives")
    func splitFrame() {
        var machine = Self.openMachine()
        var bytes = Self.bytes(1...1)
        let head = bytes.readSlice(length: 10)!
        let decodesNow1 = machine.bytesReceived(head)
        #expect(decodesNow1 == .decode)
        let steps1 = Self.drain(&machine)
        #expect(steps1.isEmpty)
        #expect(machine.bufferedBytes == 10)
        let decodesNow2 = machine.bytesReceived(bytes)
        #expect(decodesNow2 == .decode)
        let steps2 = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps2) == [0])
    }

    /// Whether writing to `buffer` again writes into the same memory, that is whether nothing
    /// else holds its storage (a shared storage is copied first, to new memory).
    static func isReusedInPlace(_ buffer: inout ByteBuffer) -> Bool {
        let before = buffer.withVeryUnsafeBytes { $0.baseAddress }
        buffer.clear()
        buffer.writeInteger(UInt8(0))
        return buffer.withVeryUnsafeBytes { $0.baseAddress } == before
    }

    static func forwardedFrames(_ steps: [ProviderConnectionStateMachine.FrameStep]) -> [NotificationFrame] {
        steps.compactMap {
            if case .forward(_, let notification, _) = $0 { return notification.frame }
            return nil
        }
    }

    @Test(
        "Frames kept in flight let go of a read buffer they fill little of (bytes copied), and share one they fill (slices)"
    )
    func readBufferReuse() {
        var machine = Self.openMachine()
        // A provider writing one notification at a time: a few hundred bytes of a TLS
        // handler's 32 KiB read buffer, and the head of the next frame.
        let next = Self.bytes(2...2)
        var sparse = ByteBufferAllocator().buffer(capacity: 32 * 1024)
        sparse.writeImmutableBuffer(Self.bytes(1...1))
        sparse.writeImmutableBuffer(next.getSlice(at: 0, length: 10)!)
        #expect(machine.bytesReceived(sparse) == .decode)
        let steps1 = Self.drain(&machine)
        #expect(Self.forwardedFrames(steps1) == [ProviderSessionStateMachineTests.frame(1)])
        #expect(Self.isReusedInPlace(&sparse), "neither the frame in flight nor the partial frame holds it")
        #expect(machine.bufferedBytes == 10)
        #expect(Self.forwardedFrames(steps1) == [ProviderSessionStateMachineTests.frame(1)], "its bytes are intact")

        #expect(machine.bytesReceived(next.getSlice(at: 10, length: next.readableBytes - 10)!) == .decode)
        let steps2 = Self.drain(&machine)
        #expect(Self.forwardedFrames(steps2) == [ProviderSessionStateMachineTests.frame(2)], "completed")

        // A batch that fills its buffer: its frames share it (one copy at the next read
        // instead of one per frame).
        var full = Self.bytes(3...40)
        #expect(full.readableBytes * 4 >= full.capacity)
        #expect(machine.bytesReceived(full) == .decode)
        let steps3 = Self.drain(&machine)
        #expect(Self.forwardedFrames(steps3).map(\.identifier.rawValue) == Array(3...40))
        #expect(!Self.isReusedInPlace(&full), "the frames in flight hold slices of it")
        withExtendedLifetime(steps3) {}
    }

    @Test(
        "Backpressure: decoding stops at the in-flight bound, a read is held back, and both resume as outcomes arrive"
    )
    func backpressure() throws {
        var machine = Self.openMachine(maximumInFlight: 2)
        let decodesNow = machine.bytesReceived(Self.bytes(1...5))
        #expect(decodesNow == .decode)
        let steps1 = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps1) == [0, 1])
        let reads = machine.readRequested()
        #expect(reads == .none, "paused: the socket is not read")
        let resumes1 = machine.decodingPaused()
        #expect(resumes1 == .none)
        let completed = machine.outcomeArrived(0, outcome: .accepted)
        #expect(completed.then == .decode, "no farewell, no close: decode again")
        let steps2 = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps2) == [2], "room for one more")
        let resumes2 = machine.decodingPaused()
        #expect(resumes2 == .none, "full again")
        _ = machine.outcomeArrived(1, outcome: .accepted)
        _ = machine.outcomeArrived(2, outcome: .accepted)
        let steps3 = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps3) == [3, 4])
        let resumes3 = machine.decodingPaused()
        #expect(resumes3 == .none, "the window is full again")
        _ = machine.outcomeArrived(3, outcome: .accepted)
        let steps4 = Self.drain(&machine)
        #expect(steps4.isEmpty, "everything received is forwarded")
        let resumes4 = machine.decodingPaused()
        #expect(resumes4 == .read, "the held-back read happens now")
        let resumes5 = machine.decodingPaused()
        #expect(resumes5 == .none, "once")
    }

    @Test("A malformed stream: its status, the rest dropped, a farewell, and nothing decoded after")
    func malformed() {
        var machine = Self.openMachine()
        var bytes = Self.bytes(1...1)
        bytes.writeBytes([9, 0, 0, 0, 0])  // an unknown command
        bytes.writeImmutableBuffer(Self.bytes(2...2))
        let decodesNow1 = machine.bytesReceived(bytes)
        #expect(decodesNow1 == .decode)
        let steps = Self.drain(&machine)
        #expect(steps.count == 2)
        guard case .refused(let refusal, then: .none) = steps.last else {
            Issue.record("expected a malformed frame waiting for its predecessor, got \(steps)")
            return
        }
        #expect(refusal.malformed?.status == .protocolError && refusal.status == .protocolError)
        #expect(refusal.command == nil, "the stream could not be decoded")
        #expect(machine.bufferedBytes == 0, "what follows a malformed frame is dropped")
        let action = machine.outcomeArrived(0, outcome: .accepted)
        guard case .farewell(let farewell) = action.then else {
            Issue.record("expected the farewell, got \(action.then)")
            return
        }
        #expect(farewell.packet == ErrorResponsePacket(status: .protocolError, identifier: .zero))
        let decodesNow2 = machine.bytesReceived(Self.bytes(3...3))
        #expect(decodesNow2 == .none, "draining: dropped")
        #expect(machine.bufferedBytes == 0)
        let reads = machine.readRequested()
        #expect(reads == .read, "the drain reads and drops")
        let review = machine.tenantReviewed(resolvesTo: nil, remainingCredentials: [])
        #expect(review == .unchanged, "a farewell is under way: a reload does not close it again")
    }

    @Test(
        "The end of input in the middle of a frame: complete frames are forwarded, the cut one dropped, and the connection closes after the last outcome"
    )
    func endOfInputMidFrame() {
        var machine = Self.openMachine(maximumInFlight: 2)
        var bytes = Self.bytes(1...3)
        bytes.writeImmutableBuffer(Self.bytes(4...4).getSlice(at: 0, length: 20)!)
        let decodesNow = machine.bytesReceived(bytes)
        #expect(decodesNow == .decode)
        let steps1 = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps1) == [0, 1])
        let endOfInput = machine.inputClosed()
        #expect(endOfInput == .decodeRemaining(bufferedBytes: machine.bufferedBytes, channelGone: false))
        #expect(machine.bufferedBytes > 20, "frame 3 and the cut one")
        let steps2 = Self.drain(&machine)
        #expect(steps2.isEmpty, "the window is full")
        _ = machine.outcomeArrived(0, outcome: .accepted)
        let steps3 = Self.drain(&machine)
        #expect(
            steps3 == [
                .forward(
                    2,
                    ForwardedNotification(tenant: Self.tenant, frame: ProviderSessionStateMachineTests.frame(3)),
                    claimFirst: false
                )
            ]
        )
        _ = machine.outcomeArrived(1, outcome: .accepted)
        let steps4 = Self.drain(&machine)
        #expect(steps4 == [.partialFrameDropped(bytes: 20)], "no complete frame left: the cut one is dropped")
        let last = machine.outcomeArrived(2, outcome: .accepted)
        #expect(last.then == .close(.drained))
        let step = machine.nextFrameStep()
        #expect(step == nil)
    }

    @Test("Input that ends with nothing in flight closes at once; a second end of input changes nothing")
    func endOfInputIdle() {
        var machine = Self.openMachine()
        let endOfInput1 = machine.inputClosed()
        #expect(endOfInput1 == .decodeRemaining(bufferedBytes: 0, channelGone: false))
        let steps = Self.drain(&machine)
        #expect(steps == [.close(.drained)])
        let endOfInput2 = machine.inputClosed()
        #expect(endOfInput2 == .close(.inputEnded))
        let decodesAfterReset = machine.channelInactive()
        #expect(decodesAfterReset == .none)
    }

    @Test("A connection gone (a reset) still forwards what it had buffered")
    func channelGone() {
        var machine = Self.openMachine(maximumInFlight: 1)
        let decodesNow = machine.bytesReceived(Self.bytes(1...2))
        #expect(decodesNow == .decode)
        let steps1 = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps1) == [0])
        let decodesAfterReset = machine.channelInactive()
        #expect(
            decodesAfterReset == .decodeRemaining(bufferedBytes: machine.bufferedBytes, channelGone: true),
            "decode what is buffered"
        )
        #expect(machine.bufferedBytes > 0)
        let steps2 = Self.drain(&machine)
        #expect(steps2.isEmpty, "the window is full")
        _ = machine.outcomeArrived(0, outcome: .accepted)
        let steps3 = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps3) == [1])
        // The session learns that the input is exhausted when the next decode finds nothing.
        _ = machine.outcomeArrived(1, outcome: .accepted)
        let steps4 = Self.drain(&machine)
        #expect(steps4 == [.close(.drained)])
    }

    @Test(
        "Shutdown: close while preparing; status 10 at once when idle; after the in-flight ones, or at the grace period's end"
    )
    func shutdown() {
        var preparing = Self.machine()
        _ = preparing.handshakeCompleted(tenant: Self.tenant)
        _ = preparing.bytesReceived(Self.bytes(1...1))
        let shutdown1 = preparing.shutdownRequested()
        #expect(shutdown1 == .close(.beforeForwarding))
        #expect(preparing.storeReady() == .none, "closed: what was buffered is not forwarded, the provider resends it")
        #expect(preparing.nextFrameStep() == nil)

        var idle = Self.openMachine()
        guard case .farewell(let farewell) = idle.shutdownRequested() else {
            Issue.record("an idle connection says goodbye at once")
            return
        }
        #expect(farewell.status == .shutdown)
        let shutdown2 = idle.shutdownRequested()
        #expect(shutdown2 == .none, "draining")

        var busy = Self.openMachine()
        let decodesNow = busy.bytesReceived(Self.bytes(1...2))
        #expect(decodesNow == .decode)
        let steps1 = Self.drain(&busy)
        #expect(Self.forwardedSequences(steps1) == [0, 1])
        let shutdown3 = busy.shutdownRequested()
        #expect(shutdown3 == .startGraceTimer)
        let steps2 = Self.drain(&busy)
        #expect(steps2.isEmpty, "no more reading")
        let completed = busy.outcomeArrived(0, outcome: .accepted)
        #expect(completed.then == .decode, "no farewell yet")
        #expect(Self.drain(&busy).isEmpty, "shutting down: the session reads nothing more")
        guard case .farewell(let expired) = busy.shutdownGraceExpired() else {
            Issue.record("the grace period's end says goodbye")
            return
        }
        #expect(
            expired.packet == ErrorResponsePacket(status: .shutdown, identifier: NotificationIdentifier(rawValue: 1))
        )
        // Notification 2 is still in flight, and some clients resend the one status 10 names.
        #expect(expired.resendRecords.map(\.frame.identifier.rawValue).sorted() == [1, 2])
        let graceExpired = busy.shutdownGraceExpired()
        #expect(graceExpired == .none, "once")
    }

    @Test("The idle timeout closes only an open connection with nothing in flight")
    func idle() {
        var machine = Self.machine()
        #expect(machine.idleTimeout() == .none)
        _ = machine.handshakeCompleted(tenant: Self.tenant)
        #expect(machine.idleTimeout() == .none)
        _ = machine.storeReady()
        #expect(machine.idleTimeout() == .close(.idle))
        let decodesNow = machine.bytesReceived(Self.bytes(1...1))
        #expect(decodesNow == .decode)
        _ = Self.drain(&machine)
        #expect(machine.idleTimeout() == .none)
        _ = machine.outcomeArrived(0, outcome: .accepted)
        #expect(machine.idleTimeout() == .close(.idle))
    }

    @Test(
        "The store's choreography: a 200 removes only a token that may be listed; a 410 is done once its entry is stored"
    )
    func feedbackWrites() {
        let listed = FrameBuilderToken.listed
        var machine = ProviderConnectionStateMachine { $0.deviceToken == listed }
        _ = machine.handshakeCompleted(tenant: Self.tenant)
        _ = machine.storeReady()
        var bytes = ByteBuffer()
        bytes.writeNotificationFrame(ProviderSessionStateMachineTests.frame(1))
        bytes.writeNotificationFrame(
            NotificationFrame(
                command: .itemized,
                identifier: NotificationIdentifier(rawValue: 2),
                deviceToken: listed,
                payload: ByteBuffer(string: "{}")
            )
        )
        bytes.writeNotificationFrame(ProviderSessionStateMachineTests.frame(3))
        _ = machine.bytesReceived(bytes)
        #expect(Self.forwardedSequences(Self.drain(&machine)) == [0, 1, 2])

        let unlisted = machine.outcomeArrived(0, outcome: .accepted)
        #expect(unlisted.feedback == nil, "a 200 for a token on no feedback list changes nothing in the store")
        let onList = machine.outcomeArrived(1, outcome: .accepted)
        #expect(
            onList.feedback
                == .remove(
                    FeedbackKey(tenant: Self.tenant.name, environment: Self.tenant.environment, deviceToken: listed)
                )
        )

        let gone = machine.outcomeArrived(2, outcome: .unregistered(timestamp: 7))
        guard case .add(let entry, let sequence) = gone.feedback else {
            Issue.record("a 410 adds the token to the list, got \(String(describing: gone.feedback))")
            return
        }
        #expect(sequence == 2 && entry.timestamp == 7)
        let endOfInput = machine.inputClosed()
        #expect(endOfInput == .decodeRemaining(bufferedBytes: 0, channelGone: false))
        #expect(Self.drain(&machine).isEmpty, "the 410's notification is not done until its entry is stored")
        #expect(
            machine.feedbackStored(2) == .close(.drained),
            "now everything has an outcome: the connection closes"
        )
    }

    @Test(
        "A frame goes straight upstream unless the store says its tenant may hold live resend records; then its record is claimed first"
    )
    func resendCheck() {
        let recordsPossible = Mutex(false)
        var machine = ProviderConnectionStateMachine(mayHoldResendRecords: { tenant in
            tenant == Self.tenant.name && recordsPossible.withLock { $0 }
        })
        _ = machine.handshakeCompleted(tenant: Self.tenant)
        _ = machine.storeReady()
        _ = machine.bytesReceived(Self.bytes(1...1))
        let straight = Self.drain(&machine)
        #expect(
            straight == [
                .forward(
                    0,
                    ForwardedNotification(tenant: Self.tenant, frame: ProviderSessionStateMachineTests.frame(1)),
                    claimFirst: false
                )
            ]
        )

        recordsPossible.withLock { $0 = true }
        _ = machine.bytesReceived(Self.bytes(2...2))
        let checked = Self.drain(&machine)
        #expect(
            checked == [
                .forward(
                    1,
                    ForwardedNotification(tenant: Self.tenant, frame: ProviderSessionStateMachineTests.frame(2)),
                    claimFirst: true
                )
            ],
            "the tenant may hold records: the frame may be a resend (docs/protocol.md#resend-records)"
        )
    }

    @Test("A reload: channels changed keep the connection; a tenant or credentials removed close it as at shutdown")
    func tenantReview() {
        var machine = Self.openMachine()
        #expect(machine.tenantReviewed(resolvesTo: Self.tenant, remainingCredentials: []) == .unchanged)
        var renamed = Self.tenant
        renamed.channels = BroadcastChannels([
            BroadcastChannel(name: "live", id: "AAAA", token: ByteBuffer(repeating: 7, count: 32), storesMessages: nil)
        ])
        #expect(
            machine.tenantReviewed(resolvesTo: renamed, remainingCredentials: []) == .channelsChanged(renamed.channels)
        )
        #expect(machine.tenant?.channels == renamed.channels)

        guard
            case .removed(false, true, .farewell(let farewell)) = machine.tenantReviewed(
                resolvesTo: nil,
                remainingCredentials: []
            )
        else {
            Issue.record("a tenant removed: status 10 at once, nothing being in flight")
            return
        }
        #expect(farewell.status == .shutdown)
        #expect(
            machine.farewellRecordsStored()
                == .init(resolutions: [], delivery: .writeAndDrain(farewell.packet, read: false)),
            "the provider's input is open: drain before the close"
        )

        var busy = Self.openMachine()
        _ = busy.bytesReceived(Self.bytes(1...1))
        _ = Self.drain(&busy)
        var withCredentials = Self.tenant
        withCredentials.credentials = "old"
        var other = Self.machine()
        _ = other.handshakeCompleted(tenant: withCredentials)
        #expect(
            other.tenantReviewed(resolvesTo: withCredentials, remainingCredentials: ["new"])
                == .removed(tenantResolves: true, credentialsRemain: false, then: .close(.beforeForwarding)),
            "still preparing: nothing forwarded, close"
        )
        #expect(
            busy.tenantReviewed(resolvesTo: nil, remainingCredentials: [])
                == .removed(tenantResolves: false, credentialsRemain: true, then: .startGraceTimer)
        )
    }

    @Test(
        "After a farewell's records are stored: close at once when the provider's input has ended, else drain with the held-back read"
    )
    func afterFarewell() {
        var ended = Self.openMachine()
        _ = ended.bytesReceived(Self.bytes(1...1))
        _ = Self.drain(&ended)
        #expect(ended.inputClosed() == .decodeRemaining(bufferedBytes: 0, channelGone: false))
        #expect(
            ended.shutdownRequested() == .startGraceTimer,
            "the provider sent its last frame: what it sent is still forwarded"
        )
        guard case .farewell(let endedFarewell) = ended.shutdownGraceExpired() else {
            Issue.record("the grace period's end says goodbye")
            return
        }
        #expect(ended.farewellRecordsStored().delivery == .writeAndClose(endedFarewell.packet))

        var open = Self.openMachine(maximumInFlight: 1)
        _ = open.bytesReceived(Self.bytes(1...1))
        _ = Self.drain(&open)
        #expect(open.readRequested() == .none, "the window is full: the read is held back")
        let failed = open.outcomeArrived(0, outcome: .rejected(.invalidToken))
        guard case .farewell(let failedFarewell) = failed.then else {
            Issue.record("a failure's farewell, got \(failed.then)")
            return
        }
        #expect(open.farewellRecordsStored().delivery == .writeAndDrain(failedFarewell.packet, read: true))
    }

    @Test("A failure decided after the provider's connection is gone is unannounced: no records, no packet")
    func failureAfterClose() {
        var machine = Self.openMachine(maximumInFlight: 1)
        _ = machine.bytesReceived(Self.bytes(1...2))
        #expect(Self.forwardedSequences(Self.drain(&machine)) == [0])
        #expect(machine.channelInactive() == .decodeRemaining(bufferedBytes: machine.bufferedBytes, channelGone: true))
        let failed = machine.outcomeArrived(0, outcome: .rejected(.invalidToken))
        guard case .unannounced(let farewell) = failed.then else {
            Issue.record("nobody to tell, got \(failed.then)")
            return
        }
        #expect(farewell.status == .invalidToken)
        #expect(machine.nextFrameStep() == nil, "frame 2 is not forwarded after the failure")
        #expect(machine.shutdownRequested() == .none, "closed")
    }

    @Test("Outcomes of a farewell's resend records are stored only after the records")
    func resolutionsWaitForRecords() throws {
        var machine = Self.openMachine()
        _ = machine.bytesReceived(Self.bytes(1...2))
        #expect(Self.forwardedSequences(Self.drain(&machine)) == [0, 1])
        #expect(machine.shutdownRequested() == .startGraceTimer)
        guard case .farewell(let farewell) = machine.shutdownGraceExpired() else {
            Issue.record("the grace period's end says goodbye")
            return
        }
        #expect(farewell.resendRecords.count == 2)

        let early = machine.outcomeArrived(0, outcome: .accepted)
        #expect(early.resolution == nil, "its record may not be stored yet")
        let stored = machine.farewellRecordsStored()
        #expect(stored.resolutions.map(\.frame.identifier.rawValue) == [1], "the early outcome, now")
        #expect(stored.resolutions.first?.outcome == .accepted)

        let late = machine.outcomeArrived(1, outcome: .rejected(.invalidToken))
        let resolution = try #require(late.resolution, "the records are stored: at once")
        #expect(resolution.frame.identifier.rawValue == 2 && resolution.outcome == .rejected(.invalidToken))
    }

    @Test(
        "The shutdown's deadline: a farewell still storing its records, or not yet decided, is delivered at once, and once"
    )
    func shutdownDeadline() {
        // Its records are still being stored.
        var storing = Self.openMachine()
        _ = storing.bytesReceived(Self.bytes(1...2))
        #expect(Self.forwardedSequences(Self.drain(&storing)) == [0, 1])
        #expect(storing.shutdownRequested() == .startGraceTimer)
        guard case .farewell(let farewell) = storing.shutdownGraceExpired() else {
            Issue.record("the grace period's end says goodbye")
            return
        }
        #expect(storing.shutdownDeadlinePassed() == .deliver(.writeAndDrain(farewell.packet, read: false)))
        #expect(storing.shutdownDeadlinePassed() == .none, "the packet is out")
        let stored = storing.farewellRecordsStored()
        #expect(stored.delivery == .none, "written at the deadline, not again")
        #expect(storing.drainEnded() == .closeOutput)

        // The grace timer has not fired: the deadline decides the farewell.
        var late = Self.openMachine()
        _ = late.bytesReceived(Self.bytes(1...2))
        #expect(Self.forwardedSequences(Self.drain(&late)) == [0, 1])
        #expect(late.shutdownRequested() == .startGraceTimer)
        _ = late.outcomeArrived(0, outcome: .accepted)
        guard case .farewell(let decided, let delivery) = late.shutdownDeadlinePassed() else {
            Issue.record("the deadline says goodbye")
            return
        }
        #expect(
            decided.packet == ErrorResponsePacket(status: .shutdown, identifier: NotificationIdentifier(rawValue: 1))
        )
        #expect(decided.resendRecords.map(\.frame.identifier.rawValue).sorted() == [1, 2])
        #expect(delivery == .writeAndDrain(decided.packet, read: false))
        #expect(late.shutdownGraceExpired() == .none, "the timer, late, changes nothing")
        #expect(late.farewellRecordsStored().delivery == .none)

        // The provider's input ended: nothing to drain, the connection closes after the packet.
        var ended = Self.openMachine()
        _ = ended.bytesReceived(Self.bytes(1...1))
        #expect(Self.forwardedSequences(Self.drain(&ended)) == [0])
        #expect(ended.shutdownRequested() == .startGraceTimer)
        guard case .farewell(let endedFarewell) = ended.shutdownGraceExpired() else {
            Issue.record("the grace period's end says goodbye")
            return
        }
        #expect(ended.inputClosed() == .none)
        #expect(ended.shutdownDeadlinePassed() == .deliver(.writeAndClose(endedFarewell.packet)))
        #expect(ended.farewellRecordsStored().delivery == .none)
        #expect(ended.shutdownDeadlinePassed() == .none, "closed")
    }

    @Test(
        "The close after a farewell: the drain, close_notify, and the wait that reports what the provider kept sending"
    )
    func closeAfterFarewell() {
        var machine = Self.openMachine()
        let bytes = ByteBuffer(bytes: [9, 0, 0, 0, 0])  // an unknown command, nothing in flight: at once
        _ = machine.bytesReceived(bytes)
        let steps = Self.drain(&machine)
        guard case .refused(let refusal, .farewell(let farewell)) = steps.last else {
            Issue.record("expected the malformed frame's farewell, got \(steps)")
            return
        }
        #expect(refusal.status == farewell.status)
        #expect(machine.farewellRecordsStored().delivery == .writeAndDrain(farewell.packet, read: false))
        #expect(machine.bytesReceived(ByteBuffer(repeating: 1, count: 5)) == .none, "dropped")
        #expect(machine.drainEnded() == .closeOutput)
        #expect(machine.bytesReceived(ByteBuffer(repeating: 1, count: 3)) == .none, "dropped")
        #expect(machine.closeWaitEnded() == .close(.providerDidNotClose(bytesDropped: 8)))
        #expect(machine.closeWaitEnded() == .none, "a timer that fired in the same turn as the close")
        #expect(machine.channelInactive() == .none)
    }
}

/// A token the feedback-list filter of ``ProviderConnectionStateMachineTests/feedbackWrites()`` says may be listed.
enum FrameBuilderToken {
    static let listed = ByteBuffer(repeating: 0xAB, count: 32)
}

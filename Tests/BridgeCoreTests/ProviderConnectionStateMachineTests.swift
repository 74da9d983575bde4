import BridgeCore
import LegacyProtocol
import NIOCore
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
        #expect(handshake == .prepare)
        let ready = machine.storeReady()
        #expect(ready)
        return machine
    }

    /// Every step until the machine stops decoding.
    static func drain(_ machine: inout ProviderConnectionStateMachine) -> [ProviderConnectionStateMachine.FrameStep] {
        var steps: [ProviderConnectionStateMachine.FrameStep] = []
        while let step = machine.nextFrameStep() { steps.append(step) }
        return steps
    }

    static func forwardedSequences(_ steps: [ProviderConnectionStateMachine.FrameStep]) -> [ProviderSessionStateMachine.Sequence] {
        steps.compactMap {
            if case .frame(.forward(let sequence, _), _) = $0 { return sequence }
            return nil
        }
    }

    @Test("Before the handshake nothing is decoded; a certificate with no tenant is refused and closes")
    func handshake() {
        var machine = Self.machine()
        #expect(machine.isHandshaking)
        let decodesNow = machine.bytesReceived(Self.bytes(1...1))
        #expect(!decodesNow)
        let step = machine.nextFrameStep()
        #expect(step == nil)
        let reads1 = machine.readRequested()
        #expect(reads1, "the handshake needs bytes")
        let handshake1 = machine.handshakeCompleted(tenant: nil)
        #expect(handshake1 == .refuse)
        let reads2 = machine.readRequested()
        #expect(!reads2, "closed")
        let handshake2 = machine.handshakeCompleted(tenant: Self.tenant)
        #expect(handshake2 == .ignore)
        let endOfInput = machine.inputClosed()
        #expect(endOfInput == .close)
    }

    @Test("Bytes that arrive while the store is asked about the tenant wait, then are decoded in order")
    func preparingBuffers() {
        var machine = Self.machine()
        let handshake = machine.handshakeCompleted(tenant: Self.tenant)
        #expect(handshake == .prepare)
        #expect(machine.tenant == Self.tenant)
        let decodesNow1 = machine.bytesReceived(Self.bytes(1...2))
        #expect(!decodesNow1, "not decoded while preparing")
        let step = machine.nextFrameStep()
        #expect(step == nil)
        let decodesNow2 = machine.bytesReceived(Self.bytes(3...3))
        #expect(!decodesNow2)
        let ready1 = machine.storeReady()
        #expect(ready1)
        let ready2 = machine.storeReady()
        #expect(!ready2, "once")
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
        #expect(decodesNow1)
        let steps1 = Self.drain(&machine)
        #expect(steps1.isEmpty)
        #expect(machine.bufferedBytes == 10)
        let decodesNow2 = machine.bytesReceived(bytes)
        #expect(decodesNow2)
        let steps2 = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps2) == [0])
    }

    @Test("Backpressure: decoding stops at the in-flight bound, a read is held back, and both resume as outcomes arrive")
    func backpressure() throws {
        var machine = Self.openMachine(maximumInFlight: 2)
        let decodesNow = machine.bytesReceived(Self.bytes(1...5))
        #expect(decodesNow)
        let steps1 = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps1) == [0, 1])
        let reads = machine.readRequested()
        #expect(!reads, "paused: the socket is not read")
        let resumes1 = machine.resumeReading()
        #expect(!resumes1)
        let completed = machine.upstreamCompleted(0, outcome: .accepted)
        let action = try #require(completed)
        #expect(action.farewell == nil && !action.closeDrained)
        let steps2 = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps2) == [2], "room for one more")
        let resumes2 = machine.resumeReading()
        #expect(!resumes2, "full again")
        _ = machine.upstreamCompleted(1, outcome: .accepted)
        _ = machine.upstreamCompleted(2, outcome: .accepted)
        let steps3 = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps3) == [3, 4])
        let resumes3 = machine.resumeReading()
        #expect(!resumes3, "the window is full again")
        _ = machine.upstreamCompleted(3, outcome: .accepted)
        let steps4 = Self.drain(&machine)
        #expect(steps4.isEmpty, "everything received is forwarded")
        let resumes4 = machine.resumeReading()
        #expect(resumes4, "the held-back read happens now")
        let resumes5 = machine.resumeReading()
        #expect(!resumes5, "once")
    }

    @Test("A malformed stream: its status, the rest dropped, a farewell, and nothing decoded after")
    func malformed() {
        var machine = Self.openMachine()
        var bytes = Self.bytes(1...1)
        bytes.writeBytes([9, 0, 0, 0, 0])  // an unknown command
        bytes.writeImmutableBuffer(Self.bytes(2...2))
        let decodesNow1 = machine.bytesReceived(bytes)
        #expect(decodesNow1)
        let steps = Self.drain(&machine)
        #expect(steps.count == 2)
        guard case .malformed(let error, .waitForPredecessors(let status)) = steps.last else {
            Issue.record("expected a malformed frame waiting for its predecessor, got \(steps)")
            return
        }
        #expect(error.status == .protocolError && status == .protocolError)
        #expect(machine.bufferedBytes == 0, "what follows a malformed frame is dropped")
        let action = machine.upstreamCompleted(0, outcome: .accepted)
        #expect(action?.farewell?.packet == ErrorResponsePacket(status: .protocolError, identifier: .zero))
        let decodesNow2 = machine.bytesReceived(Self.bytes(3...3))
        #expect(!decodesNow2, "draining: dropped")
        #expect(machine.bufferedBytes == 0)
        let reads = machine.readRequested()
        #expect(reads, "the drain reads and drops")
        #expect(!machine.isReviewable)
    }

    @Test("The end of input in the middle of a frame: complete frames are forwarded, the cut one dropped, and the connection closes after the last outcome")
    func endOfInputMidFrame() {
        var machine = Self.openMachine(maximumInFlight: 2)
        var bytes = Self.bytes(1...3)
        bytes.writeImmutableBuffer(Self.bytes(4...4).getSlice(at: 0, length: 20)!)
        let decodesNow = machine.bytesReceived(bytes)
        #expect(decodesNow)
        let steps1 = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps1) == [0, 1])
        let endOfInput = machine.inputClosed()
        #expect(endOfInput == .decode)
        let steps2 = Self.drain(&machine)
        #expect(steps2.isEmpty, "the window is full")
        _ = machine.upstreamCompleted(0, outcome: .accepted)
        let steps3 = Self.drain(&machine)
        #expect(steps3 == [.frame(.forward(2, UpstreamNotification(tenant: Self.tenant, frame: ProviderSessionStateMachineTests.frame(3))), command: .itemized)])
        _ = machine.upstreamCompleted(1, outcome: .accepted)
        let steps4 = Self.drain(&machine)
        #expect(steps4 == [.partialFrameDropped(bytes: 20)], "no complete frame left: the cut one is dropped")
        let last = machine.upstreamCompleted(2, outcome: .accepted)
        #expect(last?.closeDrained == true)
        let step = machine.nextFrameStep()
        #expect(step == nil)
    }

    @Test("Input that ends with nothing in flight closes at once; a second end of input changes nothing")
    func endOfInputIdle() {
        var machine = Self.openMachine()
        let endOfInput1 = machine.inputClosed()
        #expect(endOfInput1 == .decode)
        let steps = Self.drain(&machine)
        #expect(steps == [.closeDrained])
        let endOfInput2 = machine.inputClosed()
        #expect(endOfInput2 == .close)
        let decodesAfterReset = machine.channelInactive()
        #expect(!decodesAfterReset)
    }

    @Test("A connection gone (a reset) still forwards what it had buffered")
    func channelGone() {
        var machine = Self.openMachine(maximumInFlight: 1)
        let decodesNow = machine.bytesReceived(Self.bytes(1...2))
        #expect(decodesNow)
        let steps1 = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps1) == [0])
        let decodesAfterReset = machine.channelInactive()
        #expect(decodesAfterReset, "decode what is buffered")
        let steps2 = Self.drain(&machine)
        #expect(steps2.isEmpty, "the window is full")
        _ = machine.upstreamCompleted(0, outcome: .accepted)
        let steps3 = Self.drain(&machine)
        #expect(Self.forwardedSequences(steps3) == [1])
        // The session learns that the input is exhausted when the next decode finds nothing.
        _ = machine.upstreamCompleted(1, outcome: .accepted)
        let steps4 = Self.drain(&machine)
        #expect(steps4 == [.closeDrained])
    }

    @Test("Shutdown: close while preparing; status 10 at once when idle; after the in-flight ones, or at the grace period's end")
    func shutdown() {
        var preparing = Self.machine()
        _ = preparing.handshakeCompleted(tenant: Self.tenant)
        let shutdown1 = preparing.shutdownRequested()
        #expect(shutdown1 == .close)

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
        #expect(decodesNow)
        let steps1 = Self.drain(&busy)
        #expect(Self.forwardedSequences(steps1) == [0, 1])
        let shutdown3 = busy.shutdownRequested()
        #expect(shutdown3 == .startGraceTimer)
        let steps2 = Self.drain(&busy)
        #expect(steps2.isEmpty, "no more reading")
        let completed = busy.upstreamCompleted(0, outcome: .accepted)
        #expect(completed?.farewell == nil)
        let expired = busy.shutdownGraceExpired()
        #expect(expired?.packet == ErrorResponsePacket(status: .shutdown, identifier: NotificationIdentifier(rawValue: 1)))
        // Notification 2 is still in flight, and some clients resend the one status 10 names.
        #expect(expired?.resendRecords.map(\.frame.identifier.rawValue).sorted() == [1, 2])
        let graceExpired = busy.shutdownGraceExpired()
        #expect(graceExpired == nil, "once")
    }

    @Test("Idle only when open with nothing in flight")
    func idle() {
        var machine = Self.machine()
        #expect(!machine.isIdle)
        _ = machine.handshakeCompleted(tenant: Self.tenant)
        #expect(!machine.isIdle)
        _ = machine.storeReady()
        #expect(machine.isIdle)
        let decodesNow = machine.bytesReceived(Self.bytes(1...1))
        #expect(decodesNow)
        _ = Self.drain(&machine)
        #expect(!machine.isIdle)
        _ = machine.upstreamCompleted(0, outcome: .accepted)
        #expect(machine.isIdle)
    }
}

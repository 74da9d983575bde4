import BridgeCore
import LegacyProtocol
import NIOCore
import Testing

@Suite("Provider session state machine")
struct ProviderSessionStateMachineTests {
    static let tenant = Tenant(name: "com.example.app", topic: "com.example.app", environment: .sandbox)

    static func frame(
        _ identifier: UInt32,
        command: NotificationFrame.Command = .itemized,
        tokenLength: Int = 32
    ) -> NotificationFrame {
        NotificationFrame(
            command: command,
            identifier: command == .simple ? .zero : NotificationIdentifier(rawValue: identifier),
            deviceToken: ByteBuffer(repeating: UInt8(truncatingIfNeeded: identifier), count: tokenLength),
            payload: ByteBuffer(string: "{}")
        )
    }

    /// What a 200 for frame `identifier` does: its token leaves the feedback list; it is counted
    /// as a command 2 notification to a device.
    static func registered(_ identifier: UInt32) -> ProviderSessionStateMachine.OutcomeAction {
        var action = ProviderSessionStateMachine.OutcomeAction()
        action.command = .itemized
        action.feedback = .registered(
            .init(tenant: tenant.name, environment: tenant.environment, deviceToken: frame(identifier).deviceToken)
        )
        return action
    }

    static func machine(maximumInFlight: Int = 256) -> ProviderSessionStateMachine {
        var configuration = ProviderSessionStateMachine.Configuration()
        configuration.maximumInFlight = maximumInFlight
        return ProviderSessionStateMachine(tenant: Self.tenant, configuration: configuration)
    }

    /// A record as most tests compare it: its frame and outcome. `recordsKeepTheForwardedIDs`
    /// checks the id.
    struct Remembered: Equatable {
        var frame: NotificationFrame
        var outcome: NotificationOutcome?

        init(frame: NotificationFrame, outcome: NotificationOutcome?) {
            self.frame = frame
            self.outcome = outcome
        }

        init(_ draft: ProviderSessionStateMachine.RecordDraft) {
            self.init(frame: draft.frame, outcome: draft.outcome)
        }
    }

    @discardableResult
    static func forward(
        _ machine: inout ProviderSessionStateMachine,
        _ identifier: UInt32
    ) -> ProviderSessionStateMachine.Sequence {
        guard case .forward(let sequence, _) = machine.frameReceived(Self.frame(identifier)) else {
            Issue.record("frame \(identifier) was not forwarded")
            return .max
        }
        return sequence
    }

    @Test("A valid frame is forwarded with the tenant")
    func forwards() {
        var machine = Self.machine()
        let action = machine.frameReceived(Self.frame(1))
        #expect(action == .forward(0, ForwardedNotification(tenant: Self.tenant, frame: Self.frame(1))))
    }

    @Test("An outcome's action says what to count it as: the frame's command, and whether it went to a channel")
    func outcomeSaysWhatToCount() {
        var tenant = Self.tenant
        let channelFrame = Self.frame(2)
        tenant.channels = BroadcastChannels([
            BroadcastChannel(name: "scores", id: "c2", token: channelFrame.deviceToken)
        ])
        var machine = ProviderSessionStateMachine(tenant: tenant)
        let simple = Self.frame(1, command: .simple)
        guard case .forward(let device, _) = machine.frameReceived(simple),
            case .forward(let channel, _) = machine.frameReceived(channelFrame)
        else {
            Issue.record("the frames were not forwarded")
            return
        }
        let deviceAction = machine.outcomeArrived(device, outcome: .rejected(.invalidToken))
        #expect(deviceAction.command == .simple)
        #expect(!deviceAction.broadcast)
        let channelAction = machine.outcomeArrived(channel, outcome: .accepted)
        #expect(channelAction.command == .itemized)
        #expect(channelAction.broadcast)
    }

    @Test("Bad token size with nothing in flight: error-response at once")
    func localFailureAtOnce() {
        var machine = Self.machine()
        let action = machine.frameReceived(Self.frame(9, tokenLength: 31))
        #expect(
            action
                == .close(
                    .init(
                        packet: .init(status: .invalidTokenSize, identifier: .init(rawValue: 9)),
                        status: .invalidTokenSize,
                        resendRecords: []
                    )
                )
        )
        #expect(machine.frameReceived(Self.frame(10)) == .ignore)
        #expect(!machine.isReading)
    }

    @Test("A failed command-0 frame closes without a packet")
    func commandZeroHasNoPacket() {
        var machine = Self.machine()
        let action = machine.frameReceived(Self.frame(0, command: .simple, tokenLength: 0))
        #expect(action == .close(.init(packet: nil, status: .missingDeviceToken, resendRecords: [])))
    }

    @Test("A local failure waits for earlier notifications, and an earlier upstream failure wins")
    func earlierFailureWins() {
        var machine = Self.machine()
        let first = Self.forward(&machine, 1)
        let second = Self.forward(&machine, 2)
        #expect(machine.frameReceived(Self.frame(3, tokenLength: 5)) == .waitForPredecessors(.invalidTokenSize))
        #expect(!machine.isReading)
        #expect(machine.frameReceived(Self.frame(4)) == .ignore)
        #expect(machine.outcomeArrived(second, outcome: .accepted) == Self.registered(2))
        let action = machine.outcomeArrived(first, outcome: .rejected(.invalidToken))
        // 1 failed: 2 was forwarded after it and is remembered with its outcome.
        #expect(action.farewell?.packet == .init(status: .invalidToken, identifier: .init(rawValue: 1)))
        #expect(action.farewell?.status == .invalidToken)
        #expect(
            action.farewell?.resendRecords.map(Remembered.init(_:)) == [.init(frame: Self.frame(2), outcome: .accepted)]
        )
    }

    @Test("An upstream failure names k; pending successors become records resolved later")
    func upstreamFailureWithPendingSuccessors() {
        var machine = Self.machine()
        let sequences = (1...5).map { Self.forward(&machine, UInt32($0)) }
        #expect(machine.outcomeArrived(sequences[0], outcome: .accepted) == Self.registered(1))
        #expect(machine.outcomeArrived(sequences[3], outcome: .accepted).farewell == nil)
        let failed = machine.outcomeArrived(sequences[1], outcome: .rejected(.invalidToken))
        #expect(failed.farewell?.packet == .init(status: .invalidToken, identifier: .init(rawValue: 2)))
        #expect(
            failed.farewell?.resendRecords.map(Remembered.init(_:)) == [
                .init(frame: Self.frame(3), outcome: nil),
                .init(frame: Self.frame(4), outcome: .accepted),
                .init(frame: Self.frame(5), outcome: nil),
            ]
        )
        let resolved = machine.outcomeArrived(sequences[4], outcome: .rejected(.invalidToken))
        #expect(
            resolved.resolvedRecord.map(Remembered.init(_:))
                == .init(frame: Self.frame(5), outcome: .rejected(.invalidToken))
        )
        #expect(resolved.farewell == nil)
        let unregistered = machine.outcomeArrived(sequences[2], outcome: .unregistered(timestamp: 42))
        #expect(
            unregistered.resolvedRecord.map(Remembered.init(_:))
                == .init(frame: Self.frame(3), outcome: .unregistered(timestamp: 42))
        )
        #expect(
            unregistered.feedback
                == .unregistered(
                    .init(
                        tenant: "com.example.app",
                        environment: .sandbox,
                        deviceToken: Self.frame(3).deviceToken,
                        timestamp: 42
                    )
                )
        )
    }

    @Test("A record keeps the id its notification went upstream with, for a resend to reuse")
    func recordsKeepTheForwardedIDs() {
        var machine = Self.machine()
        var ids: [ForwardedNotification.ID] = []
        var sequences: [ProviderSessionStateMachine.Sequence] = []
        for identifier in UInt32(1)...3 {
            guard case .forward(let sequence, let notification) = machine.frameReceived(Self.frame(identifier)) else {
                Issue.record("frame \(identifier) was not forwarded")
                return
            }
            sequences.append(sequence)
            ids.append(notification.id)
        }
        #expect(Set(ids).count == 3, "every notification has an id of its own")
        let failed = machine.outcomeArrived(sequences[0], outcome: .rejected(.invalidToken))
        #expect(failed.farewell?.resendRecords.map(\.id) == [ids[1], ids[2]])
        let resolved = machine.outcomeArrived(sequences[2], outcome: .accepted)
        #expect(resolved.resolvedRecord?.id == ids[2])
    }

    @Test("Reading stops at the in-flight bound and resumes when the head completes")
    func backpressure() {
        var machine = Self.machine(maximumInFlight: 3)
        let sequences = (1...3).map { Self.forward(&machine, UInt32($0)) }
        #expect(!machine.isReading)
        _ = machine.outcomeArrived(sequences[2], outcome: .accepted)
        #expect(!machine.isReading, "completed behind a slow head still counts against the bound")
        _ = machine.outcomeArrived(sequences[0], outcome: .accepted)
        #expect(machine.isReading)
        #expect(machine.inFlightCount == 1)
    }

    @Test("Shutdown with nothing in flight names the last notification at once")
    func shutdownIdle() {
        var machine = Self.machine()
        let sequence = Self.forward(&machine, 7)
        _ = machine.outcomeArrived(sequence, outcome: .accepted)
        let farewell = machine.shutdownRequested()
        #expect(farewell?.packet == .init(status: .shutdown, identifier: .init(rawValue: 7)))
        #expect(farewell?.resendRecords.map(Remembered.init(_:)) == [.init(frame: Self.frame(7), outcome: .accepted)])
    }

    @Test("Shutdown waits for in-flight notifications; a failure among them is reported instead")
    func shutdownWithFailure() {
        var machine = Self.machine()
        let first = Self.forward(&machine, 1)
        let second = Self.forward(&machine, 2)
        #expect(machine.shutdownRequested() == nil)
        #expect(!machine.isReading)
        #expect(machine.outcomeArrived(first, outcome: .accepted).farewell == nil)
        let action = machine.outcomeArrived(second, outcome: .rejected(.invalidToken))
        #expect(action.farewell?.packet == .init(status: .invalidToken, identifier: .init(rawValue: 2)))
    }

    @Test("Shutdown grace expiry names the last completed prefix and records the rest")
    func shutdownGraceExpiry() {
        var machine = Self.machine()
        let sequences = (1...4).map { Self.forward(&machine, UInt32($0)) }
        _ = machine.outcomeArrived(sequences[0], outcome: .accepted)
        _ = machine.outcomeArrived(sequences[2], outcome: .accepted)
        #expect(machine.shutdownRequested() == nil)
        let farewell = machine.shutdownGraceExpired()
        #expect(farewell?.packet == .init(status: .shutdown, identifier: .init(rawValue: 1)))
        #expect(farewell?.resendRecords.map(\.frame.identifier.rawValue) == [1, 2, 3, 4])
        #expect(farewell?.resendRecords.map(\.outcome) == [.accepted, nil, .accepted, nil])
    }

    @Test("After the provider closed its side, outcomes still feed the feedback list")
    func outcomesAfterInputClosed() {
        var machine = Self.machine()
        let sequence = Self.forward(&machine, 1)
        machine.inputClosed()
        let action = machine.outcomeArrived(sequence, outcome: .unregistered(timestamp: 9))
        #expect(action.feedback?.key.deviceToken == Self.frame(1).deviceToken)
        #expect(action.feedback?.key.tenant == "com.example.app")
        #expect(action.farewell == nil)
        #expect(action.resolvedRecord == nil)
    }

    @Test("End of input is not loss: buffered frames are still forwarded, and the last outcome closes")
    func endOfInputDrains() {
        var machine = Self.machine(maximumInFlight: 2)
        let first = Self.forward(&machine, 1)
        let second = Self.forward(&machine, 2)
        #expect(!machine.isReading, "window full")
        machine.inputClosed()
        #expect(machine.isInputClosed)
        // The window drains; the frames still buffered are forwarded.
        #expect(machine.outcomeArrived(first, outcome: .accepted).closeDrained == false)
        #expect(machine.isReading)
        let third = Self.forward(&machine, 3)
        let closesNow = machine.inputExhausted()
        #expect(!closesNow, "two still in flight")
        #expect(machine.outcomeArrived(third, outcome: .accepted).closeDrained == false)
        let last = machine.outcomeArrived(second, outcome: .accepted)
        #expect(last.closeDrained)
        #expect(last.farewell == nil)
    }

    @Test("End of input with nothing in flight closes at once")
    func endOfInputIdle() {
        var machine = Self.machine()
        let sequence = Self.forward(&machine, 1)
        _ = machine.outcomeArrived(sequence, outcome: .accepted)
        machine.inputClosed()
        let closesNow = machine.inputExhausted()
        #expect(closesNow)
    }

    @Test("A failure after the end of input is still a farewell, for a provider that half-closed")
    func failureAfterInputClosed() {
        var machine = Self.machine()
        let first = Self.forward(&machine, 1)
        let second = Self.forward(&machine, 2)
        machine.inputClosed()
        let closesNow = machine.inputExhausted()
        #expect(!closesNow)
        let action = machine.outcomeArrived(first, outcome: .rejected(.invalidToken))
        #expect(action.farewell?.packet == .init(status: .invalidToken, identifier: .init(rawValue: 1)))
        #expect(action.farewell?.resendRecords.map(\.frame.identifier.rawValue) == [2])
        #expect(
            machine.outcomeArrived(second, outcome: .accepted).closeDrained == false,
            "the farewell closes, not the drain"
        )
    }

    @Test("Shutdown after the end of input keeps forwarding what the provider sent")
    func shutdownAfterInputClosed() {
        var machine = Self.machine(maximumInFlight: 1)
        let first = Self.forward(&machine, 1)
        machine.inputClosed()
        let farewell = machine.shutdownRequested()
        #expect(farewell == nil)
        _ = machine.outcomeArrived(first, outcome: .accepted)
        #expect(machine.isReading, "what is buffered is still forwarded")
        let second = Self.forward(&machine, 2)
        let closesNow = machine.inputExhausted()
        #expect(!closesNow)
        #expect(machine.outcomeArrived(second, outcome: .accepted).closeDrained)
    }

    @Test("A 410 is done only once its feedback entry is stored: status 10 does not name it before")
    func unregisteredWaitsForTheStore() {
        var machine = Self.machine()
        let first = Self.forward(&machine, 1)
        let second = Self.forward(&machine, 2)
        _ = machine.outcomeArrived(first, outcome: .accepted)
        let gone = machine.outcomeArrived(second, outcome: .unregistered(timestamp: 7))
        #expect(gone.feedback != nil)
        #expect(machine.inFlightCount == 0)
        let farewellBefore = machine.shutdownRequested()
        #expect(farewellBefore == nil, "the 410's entry is not stored yet")
        let stored = machine.feedbackStored(second)
        #expect(stored.farewell?.packet == .init(status: .shutdown, identifier: .init(rawValue: 2)))
    }

    @Test("A drained connection closes only after the last 410's entry is stored")
    func drainWaitsForTheStore() {
        var machine = Self.machine()
        let sequence = Self.forward(&machine, 1)
        machine.inputClosed()
        let closesNow = machine.inputExhausted()
        #expect(!closesNow)
        #expect(machine.outcomeArrived(sequence, outcome: .unregistered(timestamp: 1)).closeDrained == false)
        #expect(machine.feedbackStored(sequence).closeDrained)
    }

    @Test("No topic: status 3 for every frame")
    func missingTopic() {
        var machine = ProviderSessionStateMachine(tenant: Tenant(name: "x", topic: nil, environment: .production))
        #expect(
            machine.frameReceived(Self.frame(5))
                == .close(
                    .init(
                        packet: .init(status: .missingTopic, identifier: .init(rawValue: 5)),
                        status: .missingTopic,
                        resendRecords: []
                    )
                )
        )
    }
}

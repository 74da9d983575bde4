import BridgeCore
import LegacyProtocol
import NIOCore

/// One fuzz input run through the machine the gateway runs for each provider connection
/// (``ProviderConnectionStateMachine``: its buffer, the decoder, the session): the input is a
/// provider's byte stream, cut into reads of a size its first byte decides, and upstream
/// outcomes are fed back as the step count decides, so that the failure, resend-record,
/// end-of-input and shutdown paths run too. The same bytes go through the PROXY protocol header
/// parser first (``ProxyHeaderFuzzCheck``). A crash or a broken precondition is a finding.
///
/// Shared by the libFuzzer target and by the tests that replay the corpus and every crasher.
package struct LegacyStreamFuzzRun {
    var input: Slice<UnsafeBufferPointer<UInt8>>
    var chunkSize: Int

    package init(input: UnsafeBufferPointer<UInt8>) {
        self.chunkSize = Int((input.first ?? 0) % 64) + 1
        self.input = input.dropFirst()
    }

    package func run() {
        // A load balancer's PROXY header comes before the same listeners' TLS: its parser gets
        // the same bytes in the same reads.
        ProxyHeaderFuzzCheck.run(self.input, chunkSize: self.chunkSize)
        let topic: String? = self.chunkSize % 5 == 0 ? nil : (self.chunkSize % 3 == 0 ? "app.voip" : "app")
        var machine = ProviderConnectionStateMachine(
            sessionConfiguration: {
                var configuration = ProviderSessionStateMachine.Configuration()
                configuration.maximumInFlight = 4
                return configuration
            }()
        )
        let tenant = Tenant(name: "fuzz", topic: topic, environment: .sandbox)
        precondition(machine.handshakeCompleted(tenant: tenant) == .prepare(tenant))
        var outstanding: [ProviderSessionStateMachine.Sequence] = []
        var step = 0
        var closed = false
        /// A farewell's records the store has not answered for yet.
        var recordsPending = false

        func checkFarewell(_ farewell: ProviderSessionStateMachine.Farewell?) {
            if let farewell {
                precondition(farewell.packet?.status != .noErrors, "status 0 is never sent")
            }
        }

        func recordsStored() {
            let stored = machine.farewellRecordsStored()
            precondition(stored.resolutions.allSatisfy { $0.outcome != nil }, "a resolution without an outcome")
            recordsPending = false
        }

        /// What the gateway does with an action that follows an outcome.
        func follow(_ action: ProviderConnectionStateMachine.NextAction) {
            switch action {
            case .farewell(let farewell):
                checkFarewell(farewell)
                // The gateway stores its records, then writes the packet. For half the inputs the
                // store answers only at the end, after the shutdown's deadline if there is one.
                recordsPending = true
                if self.chunkSize % 2 == 1 { recordsStored() }
            case .unannounced(let farewell): checkFarewell(farewell)
            case .close: closed = true
            case .decode: decode()
            case .none, .startGraceTimer: break
            }
        }

        /// What the gateway does with an action about the input.
        func follow(_ action: ProviderConnectionStateMachine.InputAction) {
            switch action {
            case .decode, .decodeRemaining: decode()
            case .close: closed = true
            case .none: break
            }
        }

        /// What the gateway does at the shutdown's deadline.
        func follow(_ action: ProviderConnectionStateMachine.ShutdownDeadlineAction) {
            switch action {
            case .farewell(let farewell, let delivery):
                checkFarewell(farewell)
                precondition(delivery != .none, "a farewell decided at the deadline goes out")
                recordsPending = true
            case .deliver(let delivery):
                precondition(recordsPending, "delivered at the deadline, but not waiting for records")
                precondition(delivery != .none)
            case .unannounced(let farewell): checkFarewell(farewell)
            case .none: break
            }
        }

        /// Decodes while the machine decodes, as the gateway does after every event.
        func decode() {
            while let frameStep = machine.nextFrameStep() {
                switch frameStep {
                case .forward(let sequence, let notification, _):
                    precondition(
                        notification.frame.deviceToken.readableBytes <= LegacyProtocolLimits.maximumTokenLength
                    )
                    outstanding.append(sequence)
                case .refused(let refusal, let then):
                    precondition(refusal.status != .noErrors)
                    follow(then)
                case .partialFrameDropped:
                    break
                case .close:
                    precondition(outstanding.isEmpty, "closed with notifications in flight")
                    closed = true
                }
            }
        }

        func completeOne() {
            guard !outstanding.isEmpty else { return }
            let pick = step % outstanding.count
            let sequence = outstanding.remove(at: pick)
            let outcomes: [NotificationOutcome] = [
                .accepted, .accepted, .unregistered(timestamp: 1), .rejected(.invalidToken), .dropped,
            ]
            let completion = machine.outcomeArrived(sequence, outcome: outcomes[step % outcomes.count])
            if case .add(_, let stored) = completion.feedback {
                precondition(stored == sequence, "a 410 reports its own notification")
            }
            precondition(completion.resolution.map { $0.outcome != nil } ?? true, "a resolution without an outcome")
            follow(completion.then)
            if case .add = completion.feedback {
                // The store commits the 410's entry: the notification is done.
                follow(machine.feedbackStored(sequence))
            }
        }

        // Bytes before the store is ready are buffered, not decoded.
        var offset = self.input.startIndex
        if offset < self.input.endIndex {
            let end = min(offset + self.chunkSize, self.input.endIndex)
            precondition(
                machine.bytesReceived(ByteBuffer(bytes: self.input[offset..<end])) == .none,
                "decoded before the store was ready"
            )
            offset = end
        }
        precondition(machine.storeReady() == .decode)
        decode()
        while offset < self.input.endIndex {
            let end = min(offset + self.chunkSize, self.input.endIndex)
            follow(machine.bytesReceived(ByteBuffer(bytes: self.input[offset..<end])))
            offset = end
            step += 1
            if machine.readRequested() == .none { completeOne() }
            if step % 7 == 0 { completeOne() }
            if step == 50 { follow(machine.shutdownRequested()) }
            if step == 60 { follow(machine.shutdownDeadlinePassed()) }
        }
        // The end of input, as a provider that writes and closes: what is buffered is still
        // decoded and forwarded as outcomes drain the window.
        follow(machine.inputClosed())
        while !outstanding.isEmpty {
            step += 1
            completeOne()
        }
        follow(machine.shutdownGraceExpired())
        if recordsPending { recordsStored() }
        if closed {
            precondition(machine.nextFrameStep() == nil, "a closed connection decodes nothing")
        }
    }
}

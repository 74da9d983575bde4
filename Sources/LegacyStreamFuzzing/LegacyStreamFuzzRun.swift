import BridgeCore
import LegacyProtocol
import NIOCore

/// One fuzz input run through the machine the gateway runs for each provider connection
/// (``ProviderConnectionStateMachine``: its buffer, the decoder, the session): the input is a
/// provider's byte stream, cut into reads of a size its first byte decides, and upstream
/// outcomes are fed back as the step count decides, so that the failure, resend-record,
/// end-of-input and shutdown paths run too. A crash or a broken precondition is a finding.
///
/// Shared by the libFuzzer target and by the tests that replay the corpus and every crasher.
public struct LegacyStreamFuzzRun {
    var input: Slice<UnsafeBufferPointer<UInt8>>
    var chunkSize: Int

    public init(input: UnsafeBufferPointer<UInt8>) {
        self.chunkSize = Int((input.first ?? 0) % 64) + 1
        self.input = input.dropFirst()
    }

    public func run() {
        let topic: String? = self.chunkSize % 5 == 0 ? nil : (self.chunkSize % 3 == 0 ? "app.voip" : "app")
        var machine = ProviderConnectionStateMachine(
            sessionConfiguration: {
                var configuration = ProviderSessionStateMachine.Configuration()
                configuration.maximumInFlight = 4
                return configuration
            }()
        )
        precondition(machine.handshakeCompleted(tenant: Tenant(name: "fuzz", topic: topic, environment: .sandbox)) == .prepare)
        var outstanding: [ProviderSessionStateMachine.Sequence] = []
        var step = 0
        var closed = false

        func checkFarewell(_ farewell: ProviderSessionStateMachine.Farewell?) {
            if let farewell {
                precondition(farewell.packet?.status != .noErrors, "status 0 is never sent")
            }
        }

        /// Decodes while the machine decodes, as the gateway does after every event.
        func decode() {
            while let frameStep = machine.nextFrameStep() {
                switch frameStep {
                case .frame(let action, _), .malformed(_, let action):
                    switch action {
                    case .forward(let sequence, let notification):
                        precondition(notification.frame.deviceToken.readableBytes <= LegacyProtocolLimits.maximumTokenLength)
                        outstanding.append(sequence)
                    case .close(let farewell):
                        checkFarewell(farewell)
                    case .waitForPredecessors, .ignore:
                        break
                    }
                    if case .malformed(let error, _) = frameStep {
                        precondition(error.status != .noErrors)
                    }
                case .partialFrameDropped:
                    break
                case .closeDrained:
                    precondition(outstanding.isEmpty, "closed with notifications in flight")
                    closed = true
                }
            }
        }

        func completeOne() {
            guard !outstanding.isEmpty else { return }
            let pick = step % outstanding.count
            let sequence = outstanding.remove(at: pick)
            let outcomes: [NotificationOutcome] = [.accepted, .accepted, .unregistered(timestamp: 1), .rejected(.invalidToken), .dropped]
            guard let action = machine.upstreamCompleted(sequence, outcome: outcomes[step % outcomes.count]) else { return }
            checkFarewell(action.farewell)
            if action.closeDrained { closed = true }
            if case .unregistered = action.feedback {
                // The store commits the 410's entry: the notification is done.
                if let stored = machine.feedbackStored(sequence) {
                    checkFarewell(stored.farewell)
                    if stored.closeDrained { closed = true }
                }
            }
            decode()
        }

        // Bytes before the store is ready are buffered, not decoded.
        var offset = self.input.startIndex
        if offset < self.input.endIndex {
            let end = min(offset + self.chunkSize, self.input.endIndex)
            precondition(!machine.bytesReceived(ByteBuffer(bytes: self.input[offset..<end])), "decoded before the store was ready")
            offset = end
        }
        precondition(machine.storeReady())
        decode()
        while offset < self.input.endIndex {
            let end = min(offset + self.chunkSize, self.input.endIndex)
            if machine.bytesReceived(ByteBuffer(bytes: self.input[offset..<end])) {
                decode()
            }
            offset = end
            step += 1
            if !machine.readRequested() { completeOne() }
            if step % 7 == 0 { completeOne() }
            if step == 50, case .farewell(let farewell) = machine.shutdownRequested() { checkFarewell(farewell) }
        }
        // The end of input, as a provider that writes and closes: what is buffered is still
        // decoded and forwarded as outcomes drain the window.
        if machine.inputClosed() == .decode { decode() }
        while !outstanding.isEmpty {
            step += 1
            completeOne()
        }
        checkFarewell(machine.shutdownGraceExpired())
        if closed {
            precondition(machine.nextFrameStep() == nil, "a closed connection decodes nothing")
        }
    }
}

import BridgeCore
import LegacyProtocol
import NIOCore

/// One fuzz input run through the decoder and the provider session state machine: the input
/// is a provider's byte stream, cut into reads of a size its first byte decides, and upstream
/// outcomes are fed back as the step count decides, so that the failure, resend-record and
/// shutdown paths run too. A crash or a broken precondition is a finding.
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
        var machine = ProviderSessionStateMachine(
            tenant: Tenant(name: "fuzz", topic: topic, environment: .sandbox),
            configuration: {
                var configuration = ProviderSessionStateMachine.Configuration()
                configuration.maximumInFlight = 4
                return configuration
            }()
        )
        var decoder = NotificationFrameDecoder()
        var buffer = ByteBuffer()
        var outstanding: [ProviderSessionStateMachine.Sequence] = []
        var step = 0

        func completeOne() {
            guard !outstanding.isEmpty else { return }
            let pick = step % outstanding.count
            let sequence = outstanding.remove(at: pick)
            let outcomes: [NotificationOutcome] = [.accepted, .accepted, .unregistered(timestamp: 1), .rejected(.invalidToken), .dropped]
            let action = machine.upstreamCompleted(sequence, outcome: outcomes[step % outcomes.count])
            if let farewell = action.farewell {
                precondition(farewell.packet?.status != .noErrors, "status 0 is never sent")
            }
            if case .unregistered = action.feedback {
                // The store commits the 410's entry: the notification is done.
                if let farewell = machine.feedbackStored(sequence).farewell {
                    precondition(farewell.packet?.status != .noErrors, "status 0 is never sent")
                }
            }
        }

        /// Decodes while the machine reads. Returns `.dry` when the decoder needs more bytes,
        /// `.paused` when the machine stopped reading, `.refused` when the stream was refused.
        enum DecodeResult { case dry, paused, refused }
        func decodeAvailable() -> DecodeResult {
            while machine.isReading {
                do {
                    guard let frame = try decoder.decode(buffer: &buffer) else { return .dry }
                    precondition(frame.deviceToken.readableBytes <= LegacyProtocolLimits.maximumTokenLength)
                    switch machine.frameReceived(frame) {
                    case .forward(let sequence, _): outstanding.append(sequence)
                    case .close, .waitForPredecessors, .ignore: break
                    }
                } catch let error as LegacyProtocolError {
                    precondition(error.status != .noErrors)
                    _ = machine.decodeFailed(error)
                    return .refused
                } catch {
                    preconditionFailure("unexpected error \(error)")
                }
            }
            return .paused
        }

        var offset = self.input.startIndex
        var refused = false
        while offset < self.input.endIndex {
            let end = min(offset + self.chunkSize, self.input.endIndex)
            buffer.writeBytes(UnsafeBufferPointer(rebasing: self.input[offset..<end]))
            offset = end
            step += 1
            if decodeAvailable() == .refused {
                refused = true
                break
            }
            buffer.discardReadBytes()
            if !machine.isReading { completeOne() }
            if step % 7 == 0 { completeOne() }
            if step == 50 { _ = machine.shutdownRequested() }
        }
        // The end of input, as a provider that writes and closes: what is buffered is still
        // decoded and forwarded as outcomes drain the window.
        machine.inputClosed()
        var exhausted = refused
        while !exhausted {
            step += 1
            switch decodeAvailable() {
            case .dry:
                _ = machine.inputExhausted()
                exhausted = true
            case .refused:
                exhausted = true
            case .paused:
                if outstanding.isEmpty {
                    exhausted = true  // stopped for good: a failure or a shutdown
                } else {
                    completeOne()
                }
            }
        }
        while !outstanding.isEmpty {
            step += 1
            completeOne()
        }
        _ = machine.shutdownGraceExpired()
    }
}

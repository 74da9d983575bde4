import LegacyProtocol

// What the connection machine answers. Each event answers a type that holds only what can
// follow it: the handshake a `HandshakeAction`, the input an `InputAction`, a read request a
// `ReadAction`, an upstream outcome an `OutcomeAction` (whose `then` is a `NextAction`, as a
// shutdown's is), a timer of the close a `CloseAction`, the shutdown's deadline a
// `ShutdownDeadlineAction`.

extension ProviderConnectionStateMachine {
    /// After the verified handshake.
    public enum HandshakeAction: Hashable, Sendable {
        /// The connection was closed meanwhile.
        case none
        /// The tenant is known: ask the resend store about it (then report ``storeReady()``).
        case prepare(Tenant)
    }

    /// After bytes, the store's answer, the end of input, or the channel gone.
    public enum InputAction: Hashable, Sendable {
        case none
        /// Decode what is buffered: ``nextFrameStep()`` until `nil`, then ``decodingPaused()``.
        case decode
        /// The input ended (`channelGone`: with the connection): decode what is left as after
        /// `.decode`; complete frames are still forwarded. `bufferedBytes`: for the log line.
        case decodeRemaining(bufferedBytes: Int, channelGone: Bool)
        case close(CloseReason)
    }

    /// After the channel asked to read, or decoding paused.
    public enum ReadAction: Hashable, Sendable {
        /// Nothing now (a read asked for is held back until the session reads again).
        case none
        /// Ask the socket for more bytes.
        case read
    }

    /// After an outcome, a stored feedback entry, a failure decided while decoding, a shutdown,
    /// or its grace period.
    public enum NextAction: Hashable, Sendable {
        case none
        /// Decode what is buffered, as after ``InputAction/decode``.
        case decode
        /// Notifications are in flight: start the grace timer, and report
        /// ``shutdownGraceExpired()`` when it fires.
        case startGraceTimer
        /// Say this farewell: store its resend records first (a resend must be recognised on
        /// any instance before the provider can learn to resend it), then report
        /// ``farewellRecordsStored()``.
        case farewell(ProviderSessionStateMachine.Farewell)
        /// A farewell decided after the connection was gone: nobody can be told and nobody will
        /// resend, so no records are made. A failure (not a shutdown) is logged and counted.
        case unannounced(ProviderSessionStateMachine.Farewell)
        case close(CloseReason)
    }

    /// After the drain, the close-notify wait, or the idle timeout.
    public enum CloseAction: Hashable, Sendable {
        case none
        /// Close the output (close_notify and FIN), keep reading and dropping, and report
        /// ``closeWaitEnded()`` after the close-notify wait, unless the provider closes first.
        case closeOutput
        case close(CloseReason)
    }

    /// After the gateway's shutdown bound passed with the connection still open
    /// (docs/protocol.md#shutdown).
    public enum ShutdownDeadlineAction: Hashable, Sendable {
        /// Nothing to say: the packet is out (its drain or close-notify wait ends the
        /// connection), or the connection is closed.
        case none
        /// The grace timer had not fired yet (a loaded event loop runs it late): say this
        /// farewell as ``NextAction/farewell(_:)`` says, but deliver its packet now, not after
        /// its resend records are stored.
        case farewell(ProviderSessionStateMachine.Farewell, delivery: FarewellRecordsStored.Delivery)
        /// The farewell's resend records are still being stored: deliver its packet now.
        /// ``farewellRecordsStored()`` then answers no delivery.
        case deliver(FarewellRecordsStored.Delivery)
        /// As ``NextAction/unannounced(_:)``: the connection is gone.
        case unannounced(ProviderSessionStateMachine.Farewell)
    }

    /// Why the connection closes: what its log line says.
    public enum CloseReason: Hashable, Sendable {
        /// The provider's input was read to its end and every notification is answered.
        case drained
        /// Nothing in flight and nothing received for the idle timeout.
        case idle
        /// The provider closed its side: before its handshake completed, or after the farewell.
        case inputEnded
        /// A shutdown, or a reload that removed the tenant, before anything was forwarded: the
        /// provider resends it all.
        case beforeForwarding
        /// The close-notify wait ended and the provider had not closed: a provider that only
        /// writes (docs/protocol.md#closing). `bytesDropped`: what it sent after the farewell.
        case providerDidNotClose(bytesDropped: Int)
    }

    /// The farewell's records are stored: outcomes that waited for them, and the packet.
    public struct FarewellRecordsStored: Hashable, Sendable {
        /// Outcomes of the farewell's records that arrived while they were stored: store them now.
        public var resolutions: [ProviderSessionStateMachine.RecordDraft]
        public var delivery: Delivery

        public enum Delivery: Hashable, Sendable {
            /// The connection is gone.
            case none
            /// Write the packet (if any), flush, and close: the provider's input has ended, so
            /// nothing will arrive to drain.
            case writeAndClose(ErrorResponsePacket?)
            /// Write the packet (if any) and flush; read and drop what still comes for the drain
            /// time, then report ``drainEnded()``. `read`: a read was held back, do it now.
            case writeAndDrain(ErrorResponsePacket?, read: Bool)
        }

        public init(resolutions: [ProviderSessionStateMachine.RecordDraft], delivery: Delivery) {
            self.resolutions = resolutions
            self.delivery = delivery
        }
    }

    /// One step of decoding what is buffered.
    public enum FrameStep: Hashable, Sendable {
        /// Send this frame's notification upstream, and report its outcome with the sequence.
        /// `claimFirst`: the tenant may hold live resend records (an error-response or a
        /// shutdown within the record window), so claim the frame's record first, and send only
        /// if no outcome is remembered (docs/protocol.md#resend-records).
        case forward(ProviderSessionStateMachine.Sequence, ForwardedNotification, claimFirst: Bool)
        /// A frame refused here; `then`: its farewell now, or `.none` while earlier
        /// notifications are answered first.
        case refused(Refusal, then: NextAction)
        /// The input ended in the middle of a frame: its bytes are dropped, not forwarded.
        case partialFrameDropped(bytes: Int)
        /// The input ended and every frame has an outcome (``CloseReason/drained``).
        case close(CloseReason)
    }

    /// A frame refused before it went upstream.
    public struct Refusal: Hashable, Sendable {
        public var status: ErrorResponseStatus
        /// The refused frame's command (`nil`: the stream could not be decoded).
        public var command: NotificationFrame.Command?
        /// Why the stream could not be decoded; the rest of the buffer is dropped.
        public var malformed: LegacyProtocolError?

        public init(status: ErrorResponseStatus, command: NotificationFrame.Command?, malformed: LegacyProtocolError?) {
            self.status = status
            self.command = command
            self.malformed = malformed
        }
    }

    /// What an outcome means: what to do next, then what to store.
    public struct OutcomeAction: Hashable, Sendable {
        /// Done first: any store write below completes after it.
        public var then: NextAction
        /// A change of the tenant's feedback list to store.
        public var feedback: FeedbackWrite?
        /// The outcome of a notification the farewell made a resend record of, to store now
        /// (its record is stored; one that arrives earlier comes with ``farewellRecordsStored()``).
        public var resolution: ProviderSessionStateMachine.RecordDraft?
        /// What the outcome is counted and logged as: its frame's command, and whether it went
        /// to a Live Activity channel.
        public var command: NotificationFrame.Command?
        public var broadcast: Bool

        public init(
            then: NextAction,
            feedback: FeedbackWrite? = nil,
            resolution: ProviderSessionStateMachine.RecordDraft? = nil,
            command: NotificationFrame.Command? = nil,
            broadcast: Bool = false
        ) {
            self.then = then
            self.feedback = feedback
            self.resolution = resolution
            self.command = command
            self.broadcast = broadcast
        }
    }

    /// A feedback list change an outcome causes.
    public enum FeedbackWrite: Hashable, Sendable {
        /// A 410: the token goes on the list; report ``feedbackStored(_:)`` with `sequence` once
        /// stored (the notification is done only then).
        case add(FeedbackEntry, sequence: ProviderSessionStateMachine.Sequence)
        /// A 200 for a token that may be on the list: it comes off.
        case remove(FeedbackKey)

        public var change: FeedbackChange {
            switch self {
            case .add(let entry, _): .unregistered(entry)
            case .remove(let key): .registered(key)
            }
        }
    }

    /// What a reloaded configuration means for the connection.
    public enum TenantReview: Hashable, Sendable {
        case unchanged
        /// The tenant's channels changed: frames from now on are read with these.
        case channelsChanged(BroadcastChannels)
        /// The certificate no longer resolves, or the tenant's credentials are gone: the
        /// connection shuts down as at a server shutdown (`then`).
        case removed(tenantResolves: Bool, credentialsRemain: Bool, then: NextAction)
    }
}

import LegacyProtocol

// What the connection machine answers: one `Action` per event, the steps of decoding, and the
// store writes an outcome causes.

extension ProviderConnectionStateMachine {
    /// What the adapter does after an event.
    public enum Action: Hashable, Sendable {
        case none
        /// The tenant is known: ask the resend store about it (then ``storeReady()``), and start
        /// the idle clock.
        case prepare(Tenant)
        /// Decode what is buffered: ``nextFrameStep()`` until `nil`, then ``decodingPaused()``.
        case decode
        /// Ask the socket for more bytes.
        case read
        /// Close the connection.
        case close
        /// Notifications are in flight: start the grace timer, and report
        /// ``shutdownGraceExpired()`` when it fires.
        case startGraceTimer
        /// Say this farewell: store its resend records first (a resend must be recognised on
        /// any instance before the provider can learn to resend it), then report
        /// ``farewellRecordsStored()``.
        case farewell(ProviderSessionStateMachine.Farewell)
        /// The farewell's packet is out: read and drop what still comes for the drain time,
        /// then report ``drainEnded()``; `read`: a read was held back, do it now.
        case drain(read: Bool)
        /// The drain is over: close the output (close_notify and FIN), keep reading and
        /// dropping, and report ``closeWaitEnded()`` after the close-notify wait, unless the
        /// provider closes first.
        case closeOutput
    }

    /// One step of decoding what is buffered.
    public enum FrameStep: Hashable, Sendable {
        /// A frame of this command was decoded and given to the session: do what it says (a
        /// `.forward` goes straight upstream: the tenant can hold no live resend record).
        case frame(ProviderSessionStateMachine.FrameReceivedAction, command: NotificationFrame.Command)
        /// The session forwards this frame, but the tenant may hold live resend records (an
        /// error-response or a shutdown within the record window): claim the frame's record
        /// first, and send it upstream only if no outcome is remembered (docs/protocol.md#resend-records).
        case forwardUnlessAnswered(
            ProviderSessionStateMachine.Sequence,
            UpstreamNotification,
            command: NotificationFrame.Command
        )
        /// The stream cannot be decoded: the buffer is dropped, and the session decided.
        case malformed(LegacyProtocolError, ProviderSessionStateMachine.FrameReceivedAction)
        /// The input ended in the middle of a frame: its bytes are dropped, not forwarded.
        case partialFrameDropped(bytes: Int)
        /// The input ended and every frame has an outcome: close the connection.
        case closeDrained
    }

    /// What an outcome changes in the store, and what the adapter does next.
    public struct Completion: Hashable, Sendable {
        /// A change of the tenant's feedback list to store.
        public var feedback: FeedbackWrite?
        /// The outcome of a notification that is already a resend record: store it after the
        /// farewell's records (a shared store must never see an outcome before its record).
        public var resolvedRecord: ProviderSessionStateMachine.RecordDraft?
        public var then: Action

        public init(
            feedback: FeedbackWrite? = nil,
            resolvedRecord: ProviderSessionStateMachine.RecordDraft? = nil,
            then: Action
        ) {
            self.feedback = feedback
            self.resolvedRecord = resolvedRecord
            self.then = then
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
        case removed(tenantResolves: Bool, credentialsRemain: Bool, then: Action)
    }
}

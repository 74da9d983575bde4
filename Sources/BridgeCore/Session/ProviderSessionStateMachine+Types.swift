import LegacyProtocol

// The session machine's configuration, and what it answers: the farewell, the resend records it
// names, and the actions of its events.

extension ProviderSessionStateMachine {
    public struct Configuration: Sendable {
        /// Forwarded notifications without an outcome (or held behind one) per connection;
        /// reading stops at this bound and resumes when it drains.
        public var maximumInFlight: Int = 256

        public init() {}
    }

    /// A notification's place in its connection.
    public typealias Sequence = UInt64

    /// What the connection says before it closes.
    public struct Farewell: Hashable, Sendable {
        /// The packet to write, or `nil` (a failed command-0 notification: Apple only closed).
        public var packet: ErrorResponsePacket?
        /// The status decided, also when no packet can carry it (for logs and metrics).
        public var status: ErrorResponseStatus
        /// Notifications forwarded after the one the packet names, which the provider will
        /// resend: remember them before writing the packet. `outcome` is `nil` while pending.
        public var resendRecords: [RecordDraft]

        public init(packet: ErrorResponsePacket?, status: ErrorResponseStatus, resendRecords: [RecordDraft]) {
            self.packet = packet
            self.status = status
            self.resendRecords = resendRecords
        }
    }

    /// A forwarded notification to remember, or whose remembered outcome is now known.
    public struct RecordDraft: Hashable, Sendable {
        public var frame: NotificationFrame
        /// The id the notification went upstream with.
        public var id: ForwardedNotification.ID
        public var outcome: NotificationOutcome?

        public init(frame: NotificationFrame, id: ForwardedNotification.ID, outcome: NotificationOutcome?) {
            self.frame = frame
            self.id = id
            self.outcome = outcome
        }
    }

    public enum FrameReceivedAction: Hashable, Sendable {
        /// Send this notification upstream and report its outcome with this sequence number.
        case forward(Sequence, ForwardedNotification)
        /// The frame failed; the farewell is decided now.
        case close(Farewell)
        /// The frame failed, but earlier notifications are still in flight: stop reading and
        /// wait for their outcomes.
        case waitForPredecessors(ErrorResponseStatus)
        /// Not forwarded: a failure came first.
        case ignore
    }

    public struct OutcomeAction: Hashable, Sendable {
        /// A 410 puts the token on the tenant's feedback list; a 200 takes it off. For a 410,
        /// the notification is done only once the entry is stored: report that with
        /// ``ProviderSessionStateMachine/feedbackStored(_:)``.
        public var feedback: FeedbackChange?
        /// The farewell, when this outcome decided it.
        public var farewell: Farewell?
        /// The outcome of a notification that is already a resend record.
        public var resolvedRecord: RecordDraft?
        /// The provider's input ended and every frame it sent has an outcome: close the
        /// connection.
        public var closeDrained = false

        public static let none = OutcomeAction()

        public init() {}
    }
}

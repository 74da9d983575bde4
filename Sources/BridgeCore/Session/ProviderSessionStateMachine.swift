import LegacyProtocol
import NIOCore

// Over 400 lines, on purpose: the legacy rules about notifications (what is forwarded, which
// failure is reported, what becomes a resend record, status 10) are one state machine over
// one in-flight window, kept whole so that docs/protocol.md's rules can be checked against it
// in one read, with the types its events and actions carry at the end.

/// The life of one provider connection, without any I/O (docs/protocol.md#frames to #shutdown).
///
/// ## States
/// - `active`: frames are read, validated and forwarded.
/// - `failing`: a notification failed (locally or upstream). Nothing more is forwarded and
///   reading stops; the machine waits until every notification *before* the failed one has an
///   outcome, because an earlier one may fail too, and the provider must hear of the earliest.
/// - `shuttingDown`: the server is stopping (docs/protocol.md#shutdown). Reading stops; in-flight notifications finish.
/// - `finished`: the farewell (error-response or status 10) was decided. Notifications forwarded
///   after the one it names are remembered as resend records; their outcomes still arrive and
///   resolve those records.
///
/// Beside the state, whether the provider's input has ended (FIN, close_notify, or the
/// connection gone): the end of input is not an error (docs/protocol.md#end-of-input). Every complete frame received
/// before it is still decoded and forwarded as the in-flight window drains; once the last one
/// has an outcome, the connection closes (`closeDrained`). A failure decided after the end is
/// still a farewell: the packet reaches a provider that only half-closed.
///
/// ## Events
/// `frameReceived`, `decodeFailed`, `outcomeArrived`, `feedbackStored` (a 410's notification
/// is done only once its feedback entry is stored), `shutdownRequested`, `shutdownGraceExpired`,
/// `inputClosed`, `inputExhausted`: one `mutating func` each, returning what to do.
///
/// ## Invariants
/// - Notifications get consecutive sequence numbers; `entries` holds, in order, every forwarded
///   notification from the oldest one without an outcome onwards. Its size is bounded by
///   `maximumInFlight` (reading stops at the bound), so memory stays flat when the upstream is slow.
/// - Nothing is forwarded once a failure is known.
/// - The error-response names the earliest failed notification; everything after it that was
///   forwarded becomes a resend record.
public struct ProviderSessionStateMachine {
    fileprivate struct Entry {
        var sequence: Sequence
        var frame: NotificationFrame
        /// The id it went upstream with: a resend record keeps it (docs/upstream.md#collapse-id).
        var id: ForwardedNotification.ID
        var outcome: NotificationOutcome?
        /// Whether it went to a Live Activity channel (its outcome is counted so).
        var broadcast: Bool
        /// Whether this notification became a resend record when the farewell was decided.
        var isRecorded = false
        /// A 410 whose feedback entry is not stored yet: the notification is not done until it
        /// is (status 10 never names it, the window keeps its place, a drained connection waits).
        var awaitingStore = false

        var isDone: Bool { self.outcome != nil && !self.awaitingStore }
    }

    private struct Failure {
        var sequence: Sequence
        var status: ErrorResponseStatus
        var identifier: NotificationIdentifier
        var command: NotificationFrame.Command?
    }

    private enum State {
        case active
        case failing(Failure)
        case shuttingDown
        case finished
    }

    private enum Input {
        /// Bytes may still arrive.
        case open
        /// The provider's input ended; complete frames may still wait in the read buffer.
        case closed
        /// Input ended and every complete frame received was fed to the machine.
        case exhausted
    }

    /// Fixed at the handshake, but for its channels, which a reload may change.
    public private(set) var tenant: Tenant
    public let configuration: Configuration
    private var state: State = .active
    private var input: Input = .open
    /// Starts small and grows with the window: most provider connections sit idle, and each
    /// entry is ~100 bytes (10,000 idle connections × 64 entries would be 64 MB).
    private var entries = CircularBuffer<Entry>(initialCapacity: 4)
    /// Sequence number of `entries.first`, or of the next notification when `entries` is empty.
    private var headSequence: Sequence = 0
    private var nextSequence: Sequence = 0
    /// The last notification that completed with all its predecessors: what status 10 names.
    private var lastCompleted: Entry?

    public init(tenant: Tenant, configuration: Configuration = .init()) {
        self.tenant = tenant
        self.configuration = configuration
    }

    /// A reloaded configuration changed the tenant's channels: frames from now on are read with
    /// the new ones.
    public mutating func channelsChanged(_ channels: BroadcastChannels) {
        self.tenant.channels = channels
    }

    /// Whether the connection should read (and decode) more frames now.
    public var isReading: Bool {
        if case .active = self.state {
            return self.entries.count < self.configuration.maximumInFlight
        }
        return false
    }

    /// Notifications forwarded whose outcome has not arrived.
    public var inFlightCount: Int {
        self.entries.reduce(0) { $0 + ($1.outcome == nil ? 1 : 0) }
    }

    /// Whether the connection can be closed for idleness without losing anything.
    public var isIdle: Bool {
        if case .active = self.state { return self.entries.isEmpty }
        return false
    }

    // MARK: Events

    public mutating func frameReceived(_ frame: NotificationFrame) -> FrameReceivedAction {
        switch self.state {
        case .active:
            let notification = ForwardedNotification(tenant: self.tenant, frame: frame)  // device or broadcast, once
            if let status = frame.validationFailure(
                hasTopic: self.tenant.topic != nil,
                maximumPayloadLength: notification.maximumPayloadLength
            ) {
                return self.localFailure(
                    Failure(
                        sequence: self.nextSequence,
                        status: status,
                        identifier: frame.identifier,
                        command: frame.command
                    )
                )
            }
            precondition(
                self.entries.count < self.configuration.maximumInFlight,
                "frame received while reading is paused"
            )
            let sequence = self.nextSequence
            self.nextSequence += 1
            self.entries.append(
                Entry(
                    sequence: sequence,
                    frame: frame,
                    id: notification.id,
                    outcome: nil,
                    broadcast: notification.isBroadcast
                )
            )
            return .forward(sequence, notification)
        case .failing, .shuttingDown, .finished:
            // Frames after a failure are not forwarded (docs/protocol.md#after-a-failure); while shutting down, reading has
            // stopped and a frame still buffered is left for the provider to resend.
            return .ignore
        }
    }

    /// The decoder refused the stream: the error names the status and identifier.
    public mutating func decodeFailed(_ error: LegacyProtocolError) -> FrameReceivedAction {
        switch self.state {
        case .active:
            return self.localFailure(
                Failure(
                    sequence: self.nextSequence,
                    status: error.status,
                    identifier: error.identifier,
                    command: error.command
                )
            )
        case .failing, .shuttingDown, .finished:
            return .ignore
        }
    }

    private mutating func localFailure(_ failure: Failure) -> FrameReceivedAction {
        self.nextSequence += 1
        self.state = .failing(failure)
        if let farewell = self.decideFailureIfPossible() {
            return .close(farewell)
        }
        return .waitForPredecessors(failure.status)
    }

    /// A forwarded notification's outcome. `remembered`: a resend's outcome taken from its
    /// record, not a new answer: it changes no feedback list (its first answer did; writing a
    /// 410 again would put back an entry a poller may have taken since).
    public mutating func outcomeArrived(
        _ sequence: Sequence,
        outcome: NotificationOutcome,
        remembered: Bool = false
    ) -> OutcomeAction {
        guard sequence >= self.headSequence, sequence - self.headSequence < UInt64(self.entries.count) else {
            preconditionFailure("outcome for unknown notification \(sequence)")
        }
        let index = self.entries.index(self.entries.startIndex, offsetBy: Int(sequence - self.headSequence))
        // In place: the subscript's setter would copy the entry out and back (its frame's
        // buffers retained and released).
        self.entries.modify(index) { entry in
            precondition(entry.outcome == nil, "second outcome for notification \(sequence)")
            entry.outcome = outcome
        }
        // Read in place: a copy of the frame would retain and release its buffers.
        let identifier = self.entries[index].frame.identifier
        let command = self.entries[index].frame.command

        var action = OutcomeAction()
        action.command = command
        action.broadcast = self.entries[index].broadcast
        switch outcome {
        case .unregistered(let timestamp) where !remembered:
            self.entries[index].awaitingStore = true
            action.feedback = .unregistered(
                FeedbackEntry(
                    tenant: self.tenant.name,
                    environment: self.tenant.environment,
                    deviceToken: self.entries[index].frame.deviceToken,
                    timestamp: timestamp
                )
            )
        case .accepted where !remembered:
            action.feedback = .registered(
                FeedbackKey(
                    tenant: self.tenant.name,
                    environment: self.tenant.environment,
                    deviceToken: self.entries[index].frame.deviceToken
                )
            )
        case .unregistered, .accepted, .rejected, .gaveUp, .dropped:
            break
        }

        switch self.state {
        case .active:
            if let status = outcome.failureStatus {
                self.state = .failing(
                    Failure(sequence: sequence, status: status, identifier: identifier, command: command)
                )
                action.farewell = self.decideFailureIfPossible()
            } else {
                self.popCompletedHead()
                action.closeDrained = self.isDrained
            }
        case .failing(var failure):
            if let status = outcome.failureStatus, sequence < failure.sequence {
                failure = Failure(sequence: sequence, status: status, identifier: identifier, command: command)
                self.state = .failing(failure)
            }
            action.farewell = self.decideFailureIfPossible()
        case .shuttingDown:
            if let status = outcome.failureStatus {
                self.state = .failing(
                    Failure(sequence: sequence, status: status, identifier: identifier, command: command)
                )
                action.farewell = self.decideFailureIfPossible()
            } else {
                self.popCompletedHead()
                if self.entries.isEmpty {
                    action.farewell = self.shutdownFarewell()
                }
            }
        case .finished:
            if self.entries[index].isRecorded {
                action.resolvedRecord = RecordDraft(self.entries[index], outcome: outcome)
            }
            self.popCompletedHead()
        }
        return action
    }

    /// The feedback entry of a 410 is stored (or could not be: that was logged): the
    /// notification is done.
    public mutating func feedbackStored(_ sequence: Sequence) -> OutcomeAction {
        precondition(sequence < self.nextSequence, "feedback stored for unknown notification \(sequence)")
        guard sequence >= self.headSequence else {
            // A failure was decided meanwhile: deciding it took this notification off the window
            // (its outcome was known), so there is nothing left to wait for.
            return .none
        }
        let index = self.entries.index(self.entries.startIndex, offsetBy: Int(sequence - self.headSequence))
        precondition(self.entries[index].awaitingStore, "feedback stored twice for notification \(sequence)")
        self.entries[index].awaitingStore = false
        var action = OutcomeAction()
        switch self.state {
        case .active:
            self.popCompletedHead()
            action.closeDrained = self.isDrained
        case .shuttingDown:
            self.popCompletedHead()
            if self.entries.isEmpty {
                action.farewell = self.shutdownFarewell()
            }
        case .failing:
            action.farewell = self.decideFailureIfPossible()
        case .finished:
            self.popCompletedHead()
        }
        return action
    }

    /// The server is stopping: stop reading; the farewell comes when in-flight notifications
    /// finish, or when the grace period ends.
    public mutating func shutdownRequested() -> Farewell? {
        switch self.state {
        case .active where self.input != .open:
            // The provider has sent its last frame and cannot resend what it does not hear
            // about: keep forwarding what it sent; the grace period still bounds the wait.
            return nil
        case .active:
            self.state = .shuttingDown
            if self.entries.isEmpty {
                return self.shutdownFarewell()
            }
            return nil
        case .failing, .shuttingDown, .finished:
            // A failure's error-response is more useful to the provider than status 10.
            return nil
        }
    }

    /// The grace period is over: status 10 names the last notification whose predecessors all
    /// completed; what is still in flight becomes resend records.
    public mutating func shutdownGraceExpired() -> Farewell? {
        switch self.state {
        case .shuttingDown, .active:
            return self.shutdownFarewell()
        case .failing(let failure):
            // Still waiting for predecessors of a failure: report the failure without them. Those
            // predecessors were forwarded; if they fail later, only logs and metrics see it.
            return self.failureFarewell(failure)
        case .finished:
            return nil
        }
    }

    /// The provider's input ended (FIN with or without close_notify, or the connection is
    /// gone): no more bytes will come. Complete frames already received are still forwarded.
    public mutating func inputClosed() {
        if self.input == .open {
            self.input = .closed
        }
    }

    /// After ``inputClosed()``: the read buffer holds no further complete frame (what is left,
    /// if anything, is a frame cut off by the end of input, which is not forwarded).
    ///
    /// - Returns: whether the connection can close now: everything forwarded has an outcome.
    ///   Otherwise ``OutcomeAction/closeDrained`` says when.
    public mutating func inputExhausted() -> Bool {
        precondition(self.input != .open, "input exhausted before it closed")
        self.input = .exhausted
        return self.isDrained
    }

    /// Whether the provider's input ended, was read to its end, and everything has an outcome.
    /// (A failure or a shutdown closes through its farewell instead.)
    private var isDrained: Bool {
        guard case .active = self.state, self.input == .exhausted else { return false }
        return self.entries.isEmpty
    }

    /// Whether the provider's input has ended.
    public var isInputClosed: Bool {
        self.input != .open
    }

    // MARK: Internals

    /// Drops completed entries from the head. In `active` and `shuttingDown` no entry is ever
    /// rejected or given up (a failure moves to `failing`), so what is popped there completed well.
    private mutating func popCompletedHead() {
        // Checked in place: `first` copied the head entry (its frame's buffers) to read a flag.
        while !self.entries.isEmpty, self.entries[self.entries.startIndex].isDone {
            let completed = self.entries.removeFirst()
            self.headSequence += 1
            switch self.state {
            case .active, .shuttingDown: self.lastCompleted = consume completed  // moved, not copied
            case .failing, .finished: break
            }
        }
        if self.entries.isEmpty {
            self.headSequence = self.nextSequence
        }
    }

    /// In `failing`: once every notification before the failure has an outcome, the farewell.
    private mutating func decideFailureIfPossible() -> Farewell? {
        guard case .failing(let failure) = self.state else { return nil }
        // Pop completed predecessors; stop at the failure or at one still in flight.
        while let head = self.entries.first, head.sequence < failure.sequence, let outcome = head.outcome {
            if let status = outcome.failureStatus {
                // An earlier failure than the one known: it is reported instead.
                let earlier = Failure(
                    sequence: head.sequence,
                    status: status,
                    identifier: head.frame.identifier,
                    command: head.frame.command
                )
                self.state = .failing(earlier)
                return self.decideFailureIfPossible()
            }
            self.lastCompleted = self.entries.removeFirst()
            self.headSequence += 1
        }
        if let head = self.entries.first, head.sequence < failure.sequence {
            return nil  // a predecessor is still in flight
        }
        return self.failureFarewell(failure)
    }

    private mutating func failureFarewell(_ failure: Failure) -> Farewell {
        var records: [RecordDraft] = []
        for entry in self.entries where entry.sequence > failure.sequence {
            records.append(RecordDraft(entry, outcome: entry.outcome))
        }
        self.finish(recordingAfter: failure.sequence)
        // Command 0 carries no identifier: Apple closed such connections without a packet.
        let packet: ErrorResponsePacket? =
            failure.command == .simple
            ? nil : ErrorResponsePacket(status: failure.status, identifier: failure.identifier)
        return Farewell(packet: packet, status: failure.status, resendRecords: records)
    }

    private mutating func shutdownFarewell() -> Farewell {
        var records: [RecordDraft] = []
        // Some clients resend the notification that status 10 names: remember it too.
        if let named = self.lastCompleted {
            records.append(RecordDraft(named, outcome: named.outcome))
        }
        for entry in self.entries {
            records.append(RecordDraft(entry, outcome: entry.outcome))
        }
        let named = self.lastCompleted?.frame.identifier ?? .zero
        self.finish(recordingAfter: nil)
        return Farewell(
            packet: ErrorResponsePacket(status: .shutdown, identifier: named),
            status: .shutdown,
            resendRecords: records
        )
    }

    /// Enters `finished`, marking the entries after `sequence` as resend records: their outcomes,
    /// when they arrive, resolve those records.
    private mutating func finish(recordingAfter sequence: Sequence?) {
        self.state = .finished
        self.lastCompleted = nil
        for index in self.entries.indices {
            if let sequence, self.entries[index].sequence <= sequence { continue }
            self.entries[index].isRecorded = true
        }
        self.popCompletedHead()
    }
}

extension ProviderSessionStateMachine.RecordDraft {
    fileprivate init(_ entry: ProviderSessionStateMachine.Entry, outcome: NotificationOutcome?) {
        self.init(frame: entry.frame, id: entry.id, outcome: outcome)
    }
}

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
        /// What an outcome is counted and logged as: its frame's command (`nil` when this
        /// action answers no outcome), and whether it went to a Live Activity channel.
        public var command: NotificationFrame.Command?
        public var broadcast = false

        public static let none = OutcomeAction()

        public init() {}
    }
}

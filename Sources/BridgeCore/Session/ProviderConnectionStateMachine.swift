import LegacyProtocol
import NIOCore

// Over 400 lines, on purpose: every event of a provider connection, from its handshake to its
// close, is answered here, so that the order of what it does (decode, read, the farewell, the
// drain and the close, the store writes an outcome causes) reads in one switch per event. Its
// action types are in ProviderConnectionStateMachine+Actions.swift; splitting the events
// across files would split the phases they share.

/// One provider connection from its verified handshake to its close, without any I/O: its
/// phases, its read buffer and decoder, its ``ProviderSessionStateMachine``, and the order of
/// its store writes.
///
/// The gateway's channel handler only executes: it feeds this machine the channel's events and
/// does the action each one answers (the stream fuzzer drives the same machine). The session
/// machine decides about notifications (what is forwarded, which failure is reported, what
/// becomes a resend record); this one decides about the connection (when bytes are buffered,
/// decoded or dropped, when to read, when to close and why), which outcomes change the store
/// and in what order, and what a reloaded configuration means for the connection.
///
/// ## Phases
/// ```
/// handshaking ─handshakeCompleted─▶ preparing ─storeReady─▶ open ─a farewell─▶ draining
///      │                               │                     │                    │
///      │ shutdown,                     │ shutdown            │ input read to its  │ drainEnded
///      │ channelInactive               │                     │ end, all answered; ▼
///      │                               │                     │ a farewell to   closing
///      ▼                               ▼                     ▼ nobody             │
///   closed ◀───────────────────────────┴─────────────────────┘                    │
///      ▲                                                                          │
///      └── channelInactive (draining, closing), closeWaitEnded, input ended ─────┘
/// ```
/// - `handshaking`: waiting for TLS (and so for the tenant). Nothing is decoded.
/// - `preparing`: the tenant is known; the resend store is learning whether it holds records
///   for it (one query for a shared store). Bytes are buffered, not decoded.
/// - `open`: frames are decoded while the session reads (backpressure: it stops at its
///   in-flight bound, and reads are held back until it drains).
/// - `draining`: the farewell's resend records are stored, then its packet is written and
///   drained: whatever arrives is read and dropped, and no close_notify goes out yet, so that a
///   client reading a little late gets the packet without the close beside it
///   (docs/protocol.md#closing).
/// - `closing`: close_notify and FIN are out; whatever arrives is still read and dropped until
///   the provider closes too or the close-notify wait ends.
/// - `closed`: outcomes of notifications still in flight keep arriving, to resolve resend records.
///
/// The session is stored beside the phase (it exists from `preparing` on), not in its payload:
/// taken out of an enum payload and put back, even through a transient case, its value is
/// copied, a retain and a release of each of its references, several times per notification.
/// Measured against the session in the payload, that cost 12–21 % more of the bridge's CPU per
/// notification with the libnghttp2 engine (docs/performance-log.md, "The provider
/// connection's session: in its phase, measured, and back beside it").
///
/// A connection whose input ended (FIN, with or without close_notify) or that is gone stays in
/// its phase: complete frames already buffered are still decoded and forwarded as the window
/// drains, and it closes (`.close(.drained)`) when the last one has an outcome
/// (docs/protocol.md#end-of-input).
///
/// Events arrive in the order the handler and this machine give them, with two exceptions a
/// timer or a late store answer can cause; those are handled where they occur and say so. An
/// event that cannot happen at all traps.
public struct ProviderConnectionStateMachine {
    private enum Phase {
        case handshaking
        case preparing
        case open
        case draining(Drain)
        case closing
        case closed
    }

    /// A farewell on its way out.
    private struct Drain {
        /// The packet to write once the resend records are stored (`nil`: a command-0 frame).
        var packet: ErrorResponsePacket?
        /// Whether the packet is written, and the drain's timer runs.
        var packetWritten = false
        /// The provider's input ended meanwhile: the close need not wait for it.
        var inputEnded: Bool
    }

    /// The resend records of the farewell: outcomes for them are stored only after the records,
    /// or a shared store could see an outcome before its record.
    private enum FarewellRecords {
        /// No farewell stored records (none yet, or it could not be said).
        case notMade
        /// Being stored; these outcomes wait for them.
        case storing(waiting: [ProviderSessionStateMachine.RecordDraft])
        case stored
    }

    private var phase = Phase.handshaking
    /// From the handshake on (`nil` while handshaking, and when the connection closed before
    /// its handshake completed); see the type's comment for why it is not in the phase.
    private var session: ProviderSessionStateMachine?
    private var farewellRecords = FarewellRecords.notMade
    /// Whether the channel is still there. A connection gone keeps its phase to forward what it
    /// had buffered (see above); a farewell it decides afterwards reaches nobody.
    private var isChannelActive = true
    private let sessionConfiguration: ProviderSessionStateMachine.Configuration
    /// Whether a token may be on its feedback list (the store's filter): a 200 for a token on
    /// no list changes nothing in the store.
    private let mayBeOnFeedbackList: @Sendable (FeedbackKey) -> Bool
    /// Whether a tenant may hold live resend records (the store's view): only then is a
    /// forwarded frame checked against them.
    private let mayHoldResendRecords: @Sendable (_ tenant: String) -> Bool
    private var decoder = NotificationFrameDecoder()
    private var buffered = ByteBuffer()
    /// Whether `buffered` is the channel's own read buffer, adopted without a copy. The TLS
    /// handler reads into that buffer again, and copies all of it first (32 KiB) while anyone
    /// else holds a part of it; so bytes left over at the end of a read are copied out of it.
    private var bufferedIsAdopted = false
    /// Whether decoded frames copy their token and payload out of `buffered` instead of keeping
    /// slices of it: when it is an adopted read that fills less than a quarter of its buffer.
    /// Frames are kept until their answer, so their slices would make the next read copy the
    /// whole buffer; a provider writing one notification at a time fills a few hundred bytes
    /// of 32 KiB, and copying those is cheaper. A fuller read's frames share that one copy.
    private var framesCopyBytes: Bool {
        self.bufferedIsAdopted && self.buffered.writerIndex < self.buffered.capacity / 4
    }
    /// A read the channel asked for while the session was not reading: done when it reads again.
    private var readPending = false
    /// Bytes that arrived after a farewell and were dropped: a provider that only writes keeps
    /// sending them until the close (docs/protocol.md#closing).
    private var bytesDroppedAfterFarewell = 0

    public init(
        sessionConfiguration: ProviderSessionStateMachine.Configuration = .init(),
        mayBeOnFeedbackList: @escaping @Sendable (FeedbackKey) -> Bool = { _ in true },
        mayHoldResendRecords: @escaping @Sendable (_ tenant: String) -> Bool = { _ in false }
    ) {
        self.sessionConfiguration = sessionConfiguration
        self.mayBeOnFeedbackList = mayBeOnFeedbackList
        self.mayHoldResendRecords = mayHoldResendRecords
    }

    // MARK: State for the adapter

    /// The connection's tenant, from the handshake on.
    public var tenant: Tenant? { self.session?.tenant }

    /// Bytes buffered and not decoded yet.
    public var bufferedBytes: Int { self.buffered.readableBytes }

    // MARK: The handshake and the store's answer

    /// The TLS handshake completed with a verified certificate that resolved to `tenant`.
    public mutating func handshakeCompleted(tenant: Tenant) -> HandshakeAction {
        switch self.phase {
        case .handshaking:
            self.session = ProviderSessionStateMachine(tenant: tenant, configuration: self.sessionConfiguration)
            self.phase = .preparing
            return .prepare(tenant)
        case .closed:
            // A shutdown closed the connection while TLS was still negotiating.
            return .none
        case .preparing, .open, .draining, .closing:
            preconditionFailure("a second verified handshake")
        }
    }

    /// The resend store knows about the tenant: decoding may start.
    public mutating func storeReady() -> InputAction {
        switch self.phase {
        case .preparing:
            self.phase = .open
            return .decode
        case .closed:
            // A shutdown or a reload closed the connection while the store was asked.
            return .none
        case .handshaking, .open, .draining, .closing:
            preconditionFailure("the store answered for a connection it was not asked about")
        }
    }

    // MARK: Reading and decoding

    /// Bytes arrived from the provider.
    public mutating func bytesReceived(_ incoming: ByteBuffer) -> InputAction {
        switch self.phase {
        case .preparing, .open:
            if self.buffered.readableBytes == 0 {
                self.buffered = incoming
                self.bufferedIsAdopted = true
            } else {
                // Compact once per read, not once per frame: forwarded frames hold slices of
                // the storage, so compacting copies what is left into new storage.
                var incoming = incoming
                self.buffered.discardReadBytes()
                self.buffered.writeBuffer(&incoming)
                self.bufferedIsAdopted = false  // written to, so copied if it was shared
            }
            if case .open = self.phase { return .decode }
            return .none
        case .draining, .closing:
            // After a farewell, frames are dropped (docs/protocol.md#after-a-failure).
            self.bytesDroppedAfterFarewell += incoming.readableBytes
            return .none
        case .handshaking, .closed:
            // Bytes behind an unverified handshake (the handshake handler is closing it), or
            // read in the same batch as a close: nobody's notifications, so dropped.
            return .none
        }
    }

    /// The channel wants to read from the socket: `.read` now, or the read is held back until
    /// the session reads again (``decodingPaused()``).
    public mutating func readRequested() -> ReadAction {
        switch self.phase {
        case .handshaking, .preparing, .draining, .closing:
            return .read
        case .open:
            if self.session!.isReading { return .read }
            self.readPending = true
            return .none
        case .closed:
            return .none
        }
    }

    /// Decodes the next frame, while the connection is open and its session reads. After
    /// `.decode`, call until it returns `nil`, then ``decodingPaused()``.
    public mutating func nextFrameStep() -> FrameStep? {
        guard case .open = self.phase else { return nil }
        let decoded = self.decodeStep()
        switch decoded {
        case .frame(.forward(let sequence, let notification), _):
            let claimFirst = self.mayHoldResendRecords(notification.tenant.name)
            return .forward(sequence, notification, claimFirst: claimFirst)
        case .frame(let action, let command):
            return self.refused(action, Refusal(status: .noErrors, command: command, malformed: nil))
        case .malformed(let error, let action):
            return self.refused(action, Refusal(status: error.status, command: nil, malformed: error))
        case .partialFrame(let bytes):
            return .partialFrameDropped(bytes: bytes)
        case .drained:
            self.enterClosed()
            return .close(.drained)
        case nil:
            self.releaseReadBuffer()
            return nil
        }
    }

    /// A frame the session refused: its farewell now, or after the earlier notifications.
    private mutating func refused(
        _ action: ProviderSessionStateMachine.FrameReceivedAction,
        _ refusal: Refusal
    ) -> FrameStep {
        var refusal = refusal
        switch action {
        case .close(let farewell):
            refusal.status = farewell.status
            return .refused(refusal, then: self.say(farewell))
        case .waitForPredecessors(let status):
            refusal.status = status
            return .refused(refusal, then: .none)
        case .forward:
            preconditionFailure("a stream that cannot be decoded forwarded a frame")
        case .ignore:
            preconditionFailure("decoded while the session does not read")
        }
    }

    /// Decoding stopped: let go of the channel's read buffer. Bytes left over (a partial
    /// frame, or whole ones while the session does not read) are copied out of it once; after
    /// that they stay where they are until the next read (see ``bytesReceived(_:)``):
    /// compacting at every pause would copy them at every outcome.
    private mutating func releaseReadBuffer() {
        if self.buffered.readableBytes == 0 {
            self.buffered = ByteBuffer()
        } else if self.bufferedIsAdopted {
            self.buffered = ByteBuffer(buffer: self.buffered)
        }
        self.bufferedIsAdopted = false
    }

    /// What ``decodeStep(_:)`` found, before the connection acts on it.
    private enum Decoded {
        case frame(ProviderSessionStateMachine.FrameReceivedAction, command: NotificationFrame.Command)
        case malformed(LegacyProtocolError, ProviderSessionStateMachine.FrameReceivedAction)
        case partialFrame(bytes: Int)
        /// The input ended, was read to its end, and everything has an outcome.
        case drained
    }

    /// One step of ``nextFrameStep()``, on an open connection (which has a session; `nil`:
    /// nothing to decode now).
    private mutating func decodeStep() -> Decoded? {
        guard self.session!.isReading else { return nil }
        do {
            if var frame = try self.decoder.decode(buffer: &self.buffered) {
                if self.framesCopyBytes {
                    frame = frame.withOwnStorage()
                }
                return .frame(self.session!.frameReceived(frame), command: frame.command)
            }
        } catch let error as LegacyProtocolError {
            self.buffered = ByteBuffer()
            return .malformed(error, self.session!.decodeFailed(error))
        } catch {
            preconditionFailure("the decoder throws LegacyProtocolError only: \(error)")
        }
        // No complete frame left. After the end of input that is the end: a partial frame is
        // dropped, and the connection closes once everything has an outcome.
        guard self.session!.isInputClosed else { return nil }
        if self.buffered.readableBytes > 0 {
            let bytes = self.buffered.readableBytes
            self.buffered = ByteBuffer()
            return .partialFrame(bytes: bytes)
        }
        return self.session!.inputExhausted() ? .drained : nil
    }

    /// Decoding stopped (``nextFrameStep()`` returned `nil`): `.read` when a held-back read can
    /// be done now (the session reads again).
    public mutating func decodingPaused() -> ReadAction {
        guard self.readPending, case .open = self.phase, self.session!.isReading else { return .none }
        self.readPending = false
        return .read
    }

    // MARK: Outcomes

    /// A forwarded notification's outcome: what to do next, and what to store after that.
    /// `remembered`: a resend's outcome taken from its record, which changes no feedback list
    /// (``ProviderSessionStateMachine/outcomeArrived(_:outcome:remembered:)``).
    public mutating func outcomeArrived(
        _ sequence: ProviderSessionStateMachine.Sequence,
        outcome: NotificationOutcome,
        remembered: Bool = false
    ) -> OutcomeAction {
        let action = self.withSession { $0.outcomeArrived(sequence, outcome: outcome, remembered: remembered) }
        var completion = OutcomeAction(
            then: self.next(after: action),
            command: action.command,
            broadcast: action.broadcast
        )
        switch action.feedback {
        case .registered(let key) where !self.mayBeOnFeedbackList(key):
            break  // almost every 200: the token is on no list, nothing to remove
        case .registered(let key):
            completion.feedback = .remove(key)
        case .unregistered(let entry):
            completion.feedback = .add(entry, sequence: sequence)
        case nil:
            break
        }
        if let resolution = action.resolvedRecord, resolution.outcome != nil {
            switch self.farewellRecords {
            case .stored:
                completion.resolution = resolution
            case .storing(var waiting):
                waiting.append(resolution)
                self.farewellRecords = .storing(waiting: waiting)
            case .notMade:
                break  // the farewell reached nobody, so it stored no records
            }
        }
        return completion
    }

    /// A 410's feedback entry is stored (or could not be: that was logged): its notification
    /// is done.
    public mutating func feedbackStored(_ sequence: ProviderSessionStateMachine.Sequence) -> NextAction {
        let action = self.withSession { $0.feedbackStored(sequence) }
        return self.next(after: action)
    }

    // MARK: The end of input

    /// The provider's input ended (`ChannelEvent.inputClosed`).
    public mutating func inputClosed() -> InputAction {
        switch self.phase {
        case .preparing, .open:
            return self.endInput(channelGone: false)
        case .draining(var drain):
            drain.inputEnded = true
            self.phase = .draining(drain)
            return .none  // the drain's end closes the connection
        case .handshaking, .closing, .closed:
            return .close(.inputEnded)
        }
    }

    /// The channel is gone (a reset, or an error closed it). What was received is still
    /// forwarded; there is just nobody left to answer.
    public mutating func channelInactive() -> InputAction {
        self.isChannelActive = false
        switch self.phase {
        case .preparing, .open:
            return self.endInput(channelGone: true)
        case .handshaking, .draining, .closing:
            self.phase = .closed
            return .none
        case .closed:
            return .none
        }
    }

    /// The read timeout fired: close when nothing would be lost (open, nothing in flight).
    /// Otherwise the connection is not idle: it waits for outcomes, the store, or its drain,
    /// each with a bound of its own.
    public mutating func idleTimeout() -> CloseAction {
        guard case .open = self.phase, self.session!.isIdle else { return .none }
        return .close(.idle)
    }

    // MARK: Shutdown and reload

    /// The server is stopping (docs/protocol.md#shutdown), or a reload removed this connection's tenant.
    public mutating func shutdownRequested() -> NextAction {
        switch self.phase {
        case .handshaking, .preparing:
            self.enterClosed()
            return .close(.beforeForwarding)
        case .open:
            guard let farewell = self.withSession({ $0.shutdownRequested() }) else {
                return .startGraceTimer
            }
            return self.say(farewell)
        case .draining, .closing, .closed:
            // A farewell is under way, or nobody is left: a second request (a reload during a
            // shutdown) changes nothing.
            return .none
        }
    }

    /// The shutdown grace period ended. `.none` when the connection said its farewell
    /// meanwhile (the timer fired in the same turn as the outcome that did).
    public mutating func shutdownGraceExpired() -> NextAction {
        guard case .open = self.phase, let farewell = self.withSession({ $0.shutdownGraceExpired() }) else {
            return .none
        }
        return self.say(farewell)
    }

    /// A reloaded configuration: `resolved` is what the connection's certificate resolves to
    /// now, `remainingCredentials` the upstream credentials that remain. A connection whose
    /// certificate no longer resolves, or whose tenant's credentials are gone, closes with
    /// status 10 once what is in flight is answered; a tenant whose channels changed keeps its
    /// connection and reads its next frames with the new channels.
    public mutating func tenantReviewed(resolvesTo resolved: Tenant?, remainingCredentials: Set<String>) -> TenantReview
    {
        // A handshake in progress is checked against the new tenants anyway; a farewell is
        // already under way.
        switch self.phase {
        case .preparing, .open: break
        case .handshaking, .draining, .closing, .closed: return .unchanged
        }
        guard let current = self.tenant else { return .unchanged }
        let credentialsRemain = current.credentials.map { remainingCredentials.contains($0) } ?? true
        guard let resolved, credentialsRemain else {
            return .removed(
                tenantResolves: resolved != nil,
                credentialsRemain: credentialsRemain,
                then: self.shutdownRequested()
            )
        }
        guard resolved.name == current.name, resolved.channels != current.channels else { return .unchanged }
        self.withSession { $0.channelsChanged(resolved.channels) }
        return .channelsChanged(resolved.channels)
    }

    /// The gateway's shutdown bound passed and the connection is still open: a farewell that
    /// has not gone out goes out now, even before its resend records are stored. The records
    /// are still stored, but a provider that resends at once may find them missing and see
    /// those notifications twice; without the packet it would know nothing of what to resend.
    public mutating func shutdownDeadlinePassed() -> ShutdownDeadlineAction {
        switch self.phase {
        case .open:
            guard let farewell = self.withSession({ $0.shutdownGraceExpired() }) else { return .none }
            switch self.say(farewell) {
            case .farewell:
                return .farewell(farewell, delivery: self.deliverPacket())
            case .unannounced:
                return .unannounced(farewell)
            case .none, .decode, .startGraceTimer, .close:
                preconditionFailure("a farewell that is neither said nor unannounced")
            }
        case .draining(let drain) where !drain.packetWritten:
            return .deliver(self.deliverPacket())
        case .draining, .closing, .closed:
            return .none
        case .handshaking, .preparing:
            preconditionFailure("a shutdown's deadline before the shutdown closed the connection")
        }
    }

    // MARK: The farewell and the close

    /// The farewell's resend records are stored (or could not be: that was logged): the
    /// outcomes that waited for them, and the packet to write unless the connection is gone or
    /// the shutdown's deadline wrote it already.
    public mutating func farewellRecordsStored() -> FarewellRecordsStored {
        guard case .storing(let waiting) = self.farewellRecords else {
            preconditionFailure("records stored for a farewell that made none")
        }
        self.farewellRecords = .stored
        switch self.phase {
        case .draining(let drain) where !drain.packetWritten:
            return FarewellRecordsStored(resolutions: waiting, delivery: self.deliverPacket())
        case .draining, .closing:
            // The shutdown's deadline delivered the packet before the records were stored.
            return FarewellRecordsStored(resolutions: waiting, delivery: .none)
        case .closed:
            // The provider reset the connection while the records were stored, or the packet
            // went out at the shutdown's deadline and the connection closed.
            return FarewellRecordsStored(resolutions: waiting, delivery: .none)
        case .handshaking, .preparing, .open:
            preconditionFailure("records stored outside a farewell")
        }
    }

    /// The farewell's packet goes out: with a drain, unless nothing will arrive to drain.
    private mutating func deliverPacket() -> FarewellRecordsStored.Delivery {
        guard case .draining(var drain) = self.phase else {
            preconditionFailure("a packet delivered outside a drain")
        }
        if drain.inputEnded || self.session!.isInputClosed {
            self.phase = .closed
            return .writeAndClose(drain.packet)
        }
        drain.packetWritten = true
        self.phase = .draining(drain)
        defer { self.readPending = false }
        return .writeAndDrain(drain.packet, read: self.readPending)
    }

    /// The drain after the packet is over: `.closeOutput` (close_notify and FIN, then wait for
    /// the provider's close), or `.close` when the provider's input ended meanwhile.
    public mutating func drainEnded() -> CloseAction {
        switch self.phase {
        case .draining(let drain):
            precondition(drain.packetWritten, "a drain that never started")
            if drain.inputEnded {
                self.phase = .closed
                return .close(.inputEnded)
            }
            self.phase = .closing
            return .closeOutput
        case .closed:
            // The provider closed in the same turn as the drain's timer fired.
            return .none
        case .handshaking, .preparing, .open, .closing:
            preconditionFailure("a drain's end outside a drain")
        }
    }

    /// The close-notify wait is over and the provider has not closed: close.
    public mutating func closeWaitEnded() -> CloseAction {
        switch self.phase {
        case .closing:
            self.phase = .closed
            return .close(.providerDidNotClose(bytesDropped: self.bytesDroppedAfterFarewell))
        case .closed:
            // The provider closed in the same turn as the wait's timer fired.
            return .none
        case .handshaking, .preparing, .open, .draining:
            preconditionFailure("a close-notify wait outside the close")
        }
    }

    // MARK: Internals

    /// Runs `body` on the session in place. Only events that follow the handshake call it (an
    /// outcome needs a forwarded frame, and so a session).
    private mutating func withSession<Result>(_ body: (inout ProviderSessionStateMachine) -> Result) -> Result {
        precondition(self.session != nil, "an event that needs a session before the handshake")
        return body(&self.session!)
    }

    /// After a notification became done: the farewell it decided, the close of a drained
    /// connection, or more frames from the buffer.
    private mutating func next(after action: ProviderSessionStateMachine.OutcomeAction) -> NextAction {
        if let farewell = action.farewell {
            return self.say(farewell)
        }
        switch self.phase {
        case .open where action.closeDrained:
            self.phase = .closed
            return .close(.drained)
        case .open:
            return .decode
        case .handshaking, .preparing, .draining, .closing, .closed:
            return .none
        }
    }

    /// The machine decided a farewell: `.farewell` while the provider can hear it, else
    /// `.unannounced` (the connection is gone: nobody to tell, and nobody will resend).
    private mutating func say(_ farewell: ProviderSessionStateMachine.Farewell) -> NextAction {
        guard self.isChannelActive else {
            self.enterClosed()
            return .unannounced(farewell)
        }
        self.enterDraining(packet: farewell.packet)
        self.farewellRecords = .storing(waiting: [])
        return .farewell(farewell)
    }

    private mutating func endInput(channelGone: Bool) -> InputAction {
        let ended = self.withSession { session -> Bool in
            guard !session.isInputClosed else { return false }
            session.inputClosed()
            return true
        }
        guard ended, case .open = self.phase else { return .none }
        return .decodeRemaining(bufferedBytes: self.buffered.readableBytes, channelGone: channelGone)
    }

    private mutating func enterDraining(packet: ErrorResponsePacket?) {
        switch self.phase {
        case .preparing, .open:
            self.phase = .draining(Drain(packet: packet, inputEnded: false))
        case .handshaking, .draining, .closing, .closed:
            break
        }
        self.buffered = ByteBuffer()
    }

    private mutating func enterClosed() {
        self.phase = .closed
        self.buffered = ByteBuffer()
    }
}

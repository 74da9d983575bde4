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
/// does the ``Action`` each one answers (the stream fuzzer drives the same machine). The session
/// machine decides about notifications (what is forwarded, which failure is reported, what
/// becomes a resend record); this one decides about the connection (when bytes are buffered,
/// decoded or dropped, when to read, when to close), which outcomes change the store, and what
/// a reloaded configuration means for the connection.
///
/// ## Phases
/// ```
/// handshaking ──handshakeCompleted(tenant)──▶ preparing ──storeReady──▶ open
///      │ shutdown                                │ shutdown                │ a farewell (failure,
///      ▼                                         ▼                         ▼ status 10)
///   closed ◀──────────channelInactive──────── draining ◀──────────────────┘
///      ▲ ▲                                       │ drainEnded              │ input ended and
///      │ └──closeWaitEnded, input ended───── closing                       │ everything answered
///      └───────────────────────────────closeDrained────────────────────────┘
/// ```
/// - `handshaking`: waiting for TLS (and so for the tenant). Nothing is decoded.
/// - `preparing`: the tenant is known; the resend store is learning whether it holds records
///   for it (one query for a shared store). Bytes are buffered, not decoded.
/// - `open`: frames are decoded while the session reads (backpressure: it stops at its
///   in-flight bound, and reads are held back until it drains).
/// - `draining`: the farewell is being written, then drained: whatever arrives is read and
///   dropped, and no close_notify goes out yet, so that a client reading a little late gets the
///   packet without the close beside it (docs/protocol.md#closing).
/// - `closing`: close_notify and FIN are out; whatever arrives is still read and dropped until
///   the provider closes too or the close-notify wait ends.
/// - `closed`: outcomes of notifications still in flight keep arriving, to resolve resend records.
///
/// The session exists from the handshake on (`preparing`, `open`, `draining`, and `closed` after
/// those). It is stored beside the phase, not inside it, so that it is mutated in place: taken
/// out of an enum's payload and put back, its value (the tenant, the in-flight window) was
/// copied and destroyed at every decoded frame (docs/performance-log.md, "Copies, hashes and
/// futures off the path").
///
/// A connection whose input ended (FIN, with or without close_notify) or that is gone stays in
/// its phase: complete frames already buffered are still decoded and forwarded as the window
/// drains, and `closeDrained` ends it when the last one has an outcome (docs/protocol.md#end-of-input).
public struct ProviderConnectionStateMachine {
    private enum Phase {
        case handshaking
        case preparing
        case open
        /// `inputEnded`: the provider's input ended meanwhile, so the close need not wait for it.
        case draining(inputEnded: Bool)
        case closing
        case closed
    }

    private var phase = Phase.handshaking
    /// `nil` while handshaking, and when the connection closed before its handshake completed.
    private var session: ProviderSessionStateMachine?
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
    public private(set) var bytesDroppedAfterFarewell = 0

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

    // MARK: Events

    /// The TLS handshake completed with a verified certificate that resolved to `tenant`.
    public mutating func handshakeCompleted(tenant: Tenant) -> Action {
        guard case .handshaking = self.phase else { return .none }
        self.session = ProviderSessionStateMachine(tenant: tenant, configuration: self.sessionConfiguration)
        self.phase = .preparing
        return .prepare(tenant)
    }

    /// The resend store knows about the tenant: decoding may start.
    public mutating func storeReady() -> Action {
        guard case .preparing = self.phase else { return .none }
        self.phase = .open
        return .decode
    }

    /// Bytes arrived from the provider.
    public mutating func bytesReceived(_ incoming: ByteBuffer) -> Action {
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
            self.bytesDroppedAfterFarewell += incoming.readableBytes
            return .none  // after a farewell, frames are dropped (docs/protocol.md#after-a-failure)
        case .handshaking, .closed:
            return .none
        }
    }

    /// The channel wants to read from the socket: `.read` now, or the read is held back until
    /// the session reads again (``decodingPaused()``).
    public mutating func readRequested() -> Action {
        let wantsData: Bool
        switch self.phase {
        case .handshaking, .preparing, .draining, .closing: wantsData = true
        case .open: wantsData = self.session?.isReading ?? false
        case .closed: wantsData = false
        }
        if !wantsData {
            self.readPending = true
        }
        return wantsData ? .read : .none
    }

    /// Decodes the next frame, while the connection is open and its session reads. After
    /// `.decode`, call until it returns `nil`, then ``decodingPaused()``.
    public mutating func nextFrameStep() -> FrameStep? {
        guard case .open = self.phase, self.session != nil else { return nil }
        let step = self.decodeStep()
        switch step {
        case .frame(.close, _), .malformed(_, .close):
            self.enterDraining()
        case .closeDrained:
            self.enterClosed()
        case .frame, .forwardUnlessAnswered, .malformed, .partialFrameDropped, nil:
            break
        }
        if step == nil {
            self.releaseReadBuffer()
        }
        return step
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

    /// One step of ``nextFrameStep()``, on an open connection (which has a session).
    private mutating func decodeStep() -> FrameStep? {
        guard self.session!.isReading else { return nil }
        do {
            if var frame = try self.decoder.decode(buffer: &self.buffered) {
                if self.framesCopyBytes {
                    frame = frame.withOwnStorage()
                }
                let action = self.session!.frameReceived(frame)
                if case .forward(let sequence, let notification) = action,
                    self.mayHoldResendRecords(notification.tenant.name)
                {
                    return .forwardUnlessAnswered(sequence, notification, command: frame.command)
                }
                return .frame(action, command: frame.command)
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
            return .partialFrameDropped(bytes: bytes)
        }
        return self.session!.inputExhausted() ? .closeDrained : nil
    }

    /// Decoding stopped (``nextFrameStep()`` returned `nil`): `.read` when a held-back read can
    /// be done now (the session reads again).
    public mutating func decodingPaused() -> Action {
        guard self.readPending, case .open = self.phase, self.session?.isReading == true else { return .none }
        self.readPending = false
        return .read
    }

    /// A forwarded notification's outcome: what to store, and what to do next.
    public mutating func upstreamCompleted(
        _ sequence: ProviderSessionStateMachine.Sequence,
        outcome: NotificationOutcome
    ) -> Completion {
        guard let action = self.withSession({ $0.upstreamCompleted(sequence, outcome: outcome) }) else {
            return Completion(then: .none)
        }
        var completion = Completion(then: self.next(after: action))
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
        if let record = action.resolvedRecord, record.outcome != nil {
            completion.resolvedRecord = record
        }
        return completion
    }

    /// A 410's feedback entry is stored (or could not be: that was logged): its notification
    /// is done.
    public mutating func feedbackStored(_ sequence: ProviderSessionStateMachine.Sequence) -> Action {
        guard let action = self.withSession({ $0.feedbackStored(sequence) }) else { return .none }
        return self.next(after: action)
    }

    /// The provider's input ended (`ChannelEvent.inputClosed`).
    public mutating func inputClosed() -> Action {
        switch self.phase {
        case .preparing, .open:
            return self.endInput()
        case .draining:
            self.phase = .draining(inputEnded: true)
            return .none  // the drain's end closes the connection
        case .handshaking, .closing, .closed:
            return .close
        }
    }

    /// The channel is gone (a reset, or an error closed it). What was received is still
    /// forwarded; there is just nobody left to answer.
    public mutating func channelInactive() -> Action {
        switch self.phase {
        case .preparing, .open:
            return self.endInput()
        case .handshaking, .draining, .closing:
            self.enterClosed()
            return .none
        case .closed:
            return .none
        }
    }

    /// The read timeout fired: `.close` when nothing would be lost (open, nothing in flight).
    public mutating func idleTimeout() -> Action {
        guard case .open = self.phase, self.session?.isIdle == true else { return .none }
        return .close
    }

    /// The server is stopping (docs/protocol.md#shutdown), or a reload removed this connection's tenant.
    public mutating func shutdownRequested() -> Action {
        switch self.phase {
        case .handshaking, .preparing:
            // Nothing forwarded yet: the provider resends it all.
            return .close
        case .open:
            guard let farewell = self.withSession({ $0.shutdownRequested() }).flatMap({ $0 }) else {
                return .startGraceTimer
            }
            self.enterDraining()
            return .farewell(farewell)
        case .draining, .closing, .closed:
            return .none
        }
    }

    /// The shutdown grace period ended.
    public mutating func shutdownGraceExpired() -> Action {
        guard case .open = self.phase, let farewell = self.withSession({ $0.shutdownGraceExpired() }).flatMap({ $0 })
        else { return .none }
        self.enterDraining()
        return .farewell(farewell)
    }

    /// The farewell's resend records are stored (or could not be: that was logged), and the
    /// connection is still there: write the packet, then `.close` when the provider's input has
    /// ended (nothing will arrive to drain), else `.drain`.
    public mutating func farewellRecordsStored() -> Action {
        guard case .draining(let inputEnded) = self.phase, let isInputClosed = self.session?.isInputClosed else {
            return .none
        }
        if isInputClosed || inputEnded {
            self.enterClosed()
            return .close
        }
        defer { self.readPending = false }
        return .drain(read: self.readPending)
    }

    /// The drain after the packet is over: `.closeOutput` (close_notify and FIN, then wait for
    /// the provider's close), or `.close` when the provider's input ended meanwhile.
    public mutating func drainEnded() -> Action {
        guard case .draining(let inputEnded) = self.phase else { return .none }
        if inputEnded {
            self.enterClosed()
            return .close
        }
        self.phase = .closing
        return .closeOutput
    }

    /// The close-notify wait is over and the provider has not closed: close.
    public mutating func closeWaitEnded() -> Action {
        guard case .closing = self.phase else { return .none }
        self.enterClosed()
        return .close
    }

    /// A farewell could not be written (the channel was gone): nothing is left to do but resolve
    /// the outcomes still in flight.
    public mutating func channelClosed() {
        self.enterClosed()
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
        guard let current = self.tenant, self.isReviewable else { return .unchanged }
        let credentialsRemain = current.credentials.map { remainingCredentials.contains($0) } ?? true
        guard let resolved, credentialsRemain else {
            return .removed(
                tenantResolves: resolved != nil,
                credentialsRemain: credentialsRemain,
                then: self.shutdownRequested()
            )
        }
        guard resolved.name == current.name, resolved.channels != current.channels else { return .unchanged }
        _ = self.withSession { $0.channelsChanged(resolved.channels) }
        return .channelsChanged(resolved.channels)
    }

    // MARK: Internals

    /// Whether a reloaded configuration can close this connection (it has a tenant and no
    /// farewell yet).
    private var isReviewable: Bool {
        switch self.phase {
        case .preparing, .open: true
        case .handshaking, .draining, .closing, .closed: false
        }
    }

    /// Runs `body` on the session in place (`nil` before the handshake).
    private mutating func withSession<Result>(_ body: (inout ProviderSessionStateMachine) -> Result) -> Result? {
        guard self.session != nil else { return nil }
        return body(&self.session!)
    }

    /// After a notification became done: the farewell it decided, the close of a drained
    /// connection, or more frames from the buffer.
    private mutating func next(after action: ProviderSessionStateMachine.UpstreamCompletedAction) -> Action {
        if let farewell = action.farewell {
            self.enterDraining()
            return .farewell(farewell)
        }
        if action.closeDrained {
            self.enterClosed()
            return .close
        }
        if case .open = self.phase { return .decode }
        return .none
    }

    private mutating func endInput() -> Action {
        let ended =
            self.withSession { session -> Bool in
                guard !session.isInputClosed else { return false }
                session.inputClosed()
                return true
            } ?? false
        guard ended, case .open = self.phase else { return .none }
        return .decode
    }

    private mutating func enterDraining() {
        switch self.phase {
        case .preparing, .open:
            self.phase = .draining(inputEnded: false)
        case .handshaking, .draining, .closing, .closed:
            break
        }
        self.buffered = ByteBuffer()
    }

    private mutating func enterClosed() {
        self.phase = .closed
    }
}

import LegacyProtocol
import NIOCore

/// One provider connection from accept to close, without any I/O: its phases, its read buffer
/// and decoder, and (from the handshake on) its ``ProviderSessionStateMachine``.
///
/// The gateway's channel handler is a thin adapter around this: it feeds it the channel's
/// events and does what it answers (the stream fuzzer drives the same machine). The session
/// machine decides about notifications (what is forwarded, which failure is reported, what
/// becomes a resend record); this one decides about the connection (when bytes are buffered,
/// decoded or dropped, when to read, when to close).
///
/// ## Phases
/// ```
/// handshaking ──handshakeCompleted(tenant)──▶ preparing ──storeReady──▶ open
///      │ no tenant / shutdown                    │ shutdown                │ a farewell (failure,
///      ▼                                         ▼                         ▼ status 10)
///   closed ◀──────────channelInactive──────── draining ◀──────────────────┘
///      ▲                                                                   │ input ended and
///      └───────────────────────────────closeDrained────────────────────────┘ everything answered
/// ```
/// - `handshaking`: waiting for TLS (and so for the tenant). Nothing is decoded.
/// - `preparing`: the tenant is known; the resend store is learning whether it holds records
///   for it (one query for a shared store). Bytes are buffered, not decoded.
/// - `open`: frames are decoded while the session reads (backpressure: it stops at its
///   in-flight bound, and reads are held back until it drains).
/// - `draining`: the farewell is being written; whatever arrives is read and dropped (§1.5).
/// - `closed`.
///
/// A connection whose input ended (FIN, with or without close_notify) or that is gone stays in
/// its phase: complete frames already buffered are still decoded and forwarded as the window
/// drains, and `closeDrained` ends it when the last one has an outcome (§1.4).
public struct ProviderConnectionStateMachine {
    private enum Phase {
        case handshaking
        case preparing
        case open
        case draining
        case closed
    }

    private var phase = Phase.handshaking
    /// Set by the handshake; mutated in place (a copy taken out and stored back would copy the
    /// whole in-flight window at every event).
    private var session: ProviderSessionStateMachine?
    private let sessionConfiguration: ProviderSessionStateMachine.Configuration
    private var decoder = NotificationFrameDecoder()
    private var buffered = ByteBuffer()
    /// A read the channel asked for while the session was not reading: done when it reads again.
    private var readPending = false

    public init(sessionConfiguration: ProviderSessionStateMachine.Configuration = .init()) {
        self.sessionConfiguration = sessionConfiguration
    }

    // MARK: Actions

    public enum HandshakeAction: Hashable, Sendable {
        /// The tenant is known: ask the resend store about it, then report ``storeReady()``.
        case prepare
        /// No tenant for this certificate: close.
        case refuse
        /// The connection is past its handshake (closing): nothing to do.
        case ignore
    }

    /// One step of decoding what is buffered.
    public enum FrameStep: Hashable, Sendable {
        /// A frame of this command was decoded and given to the session: do what it says.
        case frame(ProviderSessionStateMachine.FrameReceivedAction, command: NotificationFrame.Command)
        /// The stream cannot be decoded: the buffer is dropped, and the session decided.
        case malformed(LegacyProtocolError, ProviderSessionStateMachine.FrameReceivedAction)
        /// The input ended in the middle of a frame: its bytes are dropped, not forwarded.
        case partialFrameDropped(bytes: Int)
        /// The input ended and every frame has an outcome: close the connection.
        case closeDrained
    }

    public enum InputClosedAction: Hashable, Sendable {
        /// Decode what is buffered (``nextFrameStep()``).
        case decode
        /// Close the connection: there is nothing to finish.
        case close
        case none
    }

    public enum ShutdownAction: Hashable, Sendable {
        /// Nothing was forwarded (still in the handshake or preparing): close.
        case close
        /// Nothing is in flight: say this and close.
        case farewell(ProviderSessionStateMachine.Farewell)
        /// Notifications are in flight: the farewell comes when they finish, or at
        /// ``shutdownGraceExpired()``.
        case startGraceTimer
        case none
    }

    // MARK: State for the adapter

    /// The connection's tenant, from the handshake on.
    public var tenant: Tenant? { self.session?.tenant }

    public var isHandshaking: Bool {
        if case .handshaking = self.phase { return true }
        return false
    }

    /// A reload changed the channels of this connection's tenant (everything else about a
    /// tenant is fixed at the handshake).
    public mutating func tenantChannelsChanged(_ channels: BroadcastChannels) {
        self.session?.channelsChanged(channels)
    }

    /// Whether a reloaded configuration can close this connection (it has a tenant and no
    /// farewell yet).
    public var isReviewable: Bool {
        switch self.phase {
        case .preparing, .open: true
        case .handshaking, .draining, .closed: false
        }
    }

    /// Whether the connection may be closed for idleness without losing anything.
    public var isIdle: Bool {
        guard case .open = self.phase else { return false }
        return self.session?.isIdle ?? false
    }

    /// Whether the provider's input has ended (a farewell then closes at once, with no drain).
    public var isInputClosed: Bool { self.session?.isInputClosed ?? false }

    /// Bytes buffered and not decoded yet.
    public var bufferedBytes: Int { self.buffered.readableBytes }

    // MARK: Events

    /// The TLS handshake completed; `tenant` is what the client certificate resolves to.
    public mutating func handshakeCompleted(tenant: Tenant?) -> HandshakeAction {
        guard case .handshaking = self.phase else { return .ignore }
        guard let tenant else {
            self.phase = .closed
            return .refuse
        }
        self.session = ProviderSessionStateMachine(tenant: tenant, configuration: self.sessionConfiguration)
        self.phase = .preparing
        return .prepare
    }

    /// The resend store knows about the tenant: decoding may start.
    ///
    /// - Returns: whether to decode now (``nextFrameStep()``) and resume reading.
    public mutating func storeReady() -> Bool {
        guard case .preparing = self.phase else { return false }
        self.phase = .open
        return true
    }

    /// Bytes arrived from the provider.
    ///
    /// - Returns: whether to decode now (``nextFrameStep()``).
    public mutating func bytesReceived(_ incoming: ByteBuffer) -> Bool {
        switch self.phase {
        case .preparing, .open:
            if self.buffered.readableBytes == 0 {
                self.buffered = incoming
            } else {
                // Compact once per read, not once per frame: forwarded frames hold slices of
                // the storage, so compacting copies what is left into new storage.
                var incoming = incoming
                self.buffered.discardReadBytes()
                self.buffered.writeBuffer(&incoming)
            }
            if case .open = self.phase { return true }
            return false
        case .handshaking, .draining, .closed:
            return false  // after a farewell, frames are dropped (§1.5)
        }
    }

    /// The channel wants to read from the socket.
    ///
    /// - Returns: whether to read now. If not, the read is held until ``resumeReading()``.
    public mutating func readRequested() -> Bool {
        let wantsData: Bool
        switch self.phase {
        case .handshaking, .preparing, .draining: wantsData = true
        case .open: wantsData = self.session?.isReading ?? false
        case .closed: wantsData = false
        }
        if !wantsData {
            self.readPending = true
        }
        return wantsData
    }

    /// After the session drained: whether a held-back read should be done now.
    public mutating func resumeReading() -> Bool {
        guard self.readPending, case .open = self.phase, self.session?.isReading == true else { return false }
        self.readPending = false
        return true
    }

    /// The farewell was written: a held-back read, if any, is done now (the drain reads and
    /// drops what arrives).
    public mutating func takePendingRead() -> Bool {
        defer { self.readPending = false }
        return self.readPending
    }

    /// Decodes the next frame, while the connection is open and its session reads. Call until
    /// it returns `nil`.
    public mutating func nextFrameStep() -> FrameStep? {
        guard case .open = self.phase, self.session != nil else { return nil }
        if self.session!.isReading {
            do {
                if let frame = try self.decoder.decode(buffer: &self.buffered) {
                    let action = self.session!.frameReceived(frame)
                    if case .close = action { self.enterDraining() }
                    return .frame(action, command: frame.command)
                }
            } catch let error as LegacyProtocolError {
                self.buffered = ByteBuffer()
                let action = self.session!.decodeFailed(error)
                if case .close = action { self.enterDraining() }
                return .malformed(error, action)
            } catch {
                preconditionFailure("the decoder throws LegacyProtocolError only: \(error)")
            }
            // No complete frame left. After the end of input that is the end: a partial frame
            // is dropped, and the connection closes once everything has an outcome.
            if self.session!.isInputClosed {
                if self.buffered.readableBytes > 0 {
                    let bytes = self.buffered.readableBytes
                    self.buffered = ByteBuffer()
                    return .partialFrameDropped(bytes: bytes)
                }
                if self.session!.inputExhausted() {
                    self.phase = .closed
                    return .closeDrained
                }
            }
        }
        if self.buffered.readableBytes == 0 {
            // Let go of the storage (forwarded frames may still hold slices of it), so the next
            // read is adopted without a copy. Frames left over stay where they are until the
            // next read (see bytesReceived): compacting here would copy them at every outcome.
            self.buffered = ByteBuffer()
        }
        return nil
    }

    /// A forwarded notification's outcome. `nil` before the handshake (never happens).
    ///
    /// After it (with no farewell and no close), decode again: the window may have room.
    public mutating func upstreamCompleted(
        _ sequence: ProviderSessionStateMachine.Sequence,
        outcome: NotificationOutcome
    ) -> ProviderSessionStateMachine.UpstreamCompletedAction? {
        guard self.session != nil else { return nil }
        let action = self.session!.upstreamCompleted(sequence, outcome: outcome)
        self.apply(action)
        return action
    }

    /// A 410's feedback entry is stored: its notification is done.
    public mutating func feedbackStored(_ sequence: ProviderSessionStateMachine.Sequence) -> ProviderSessionStateMachine.UpstreamCompletedAction? {
        guard self.session != nil else { return nil }
        let action = self.session!.feedbackStored(sequence)
        self.apply(action)
        return action
    }

    /// The provider's input ended (`ChannelEvent.inputClosed`).
    public mutating func inputClosed() -> InputClosedAction {
        switch self.phase {
        case .preparing, .open:
            return self.endInput()
        case .draining:
            return .none  // the drain timer closes the connection
        case .handshaking, .closed:
            return .close
        }
    }

    /// The channel is gone (a reset, or an error closed it). What was received is still
    /// forwarded; there is just nobody left to answer.
    ///
    /// - Returns: whether to decode now (``nextFrameStep()``).
    public mutating func channelInactive() -> Bool {
        switch self.phase {
        case .preparing, .open:
            return self.endInput() == .decode
        case .handshaking, .draining:
            self.phase = .closed
            return false
        case .closed:
            return false
        }
    }

    /// A farewell could not be written (the channel was gone): nothing is left to do.
    public mutating func channelClosed() {
        self.phase = .closed
    }

    /// The server is stopping (CONTRACT §1.8), or a reload removed this connection's tenant.
    public mutating func shutdownRequested() -> ShutdownAction {
        switch self.phase {
        case .handshaking, .preparing:
            // Nothing forwarded yet: the provider resends it all.
            return .close
        case .open:
            if let farewell = self.session!.shutdownRequested() {
                self.enterDraining()
                return .farewell(farewell)
            }
            return .startGraceTimer
        case .draining, .closed:
            return .none
        }
    }

    /// The shutdown grace period ended.
    public mutating func shutdownGraceExpired() -> ProviderSessionStateMachine.Farewell? {
        guard case .open = self.phase, let farewell = self.session!.shutdownGraceExpired() else { return nil }
        self.enterDraining()
        return farewell
    }

    // MARK: Internals

    private mutating func endInput() -> InputClosedAction {
        guard self.session?.isInputClosed == false else { return .none }
        self.session!.inputClosed()
        if case .open = self.phase { return .decode }
        return .none
    }

    private mutating func apply(_ action: ProviderSessionStateMachine.UpstreamCompletedAction) {
        if action.farewell != nil {
            self.enterDraining()
        } else if action.closeDrained {
            self.phase = .closed
        }
    }

    private mutating func enterDraining() {
        self.phase = .draining
        self.buffered = ByteBuffer()
    }
}

import BridgeCore
import LegacyProtocol
import Logging
import NIOCore
import NIOSSL

/// The I/O edge of one provider connection: it only executes. It feeds a
/// ``ProviderConnectionStateMachine`` the channel's events (the verified tenant, bytes, reads,
/// the end of input, outcomes, store writes done, timers, shutdown, a reload's review) and does
/// the action each answers. It holds no phase and decides nothing; it keeps the I/O: the
/// context, the timers, the upstream sends and store writes (``ProviderConnectionWork``) and
/// what an operator sees (``ProviderConnectionReport``).
///
/// Sits after the shared ``ProviderHandshakeHandler``, which starts the idle timer. The machine
/// decodes (no separate `ByteToMessageHandler`), so decoding stops exactly when the session
/// stops reading.
package final class GatewayConnectionHandler: ChannelDuplexHandler {
    package typealias InboundIn = ByteBuffer
    package typealias OutboundIn = ByteBuffer
    package typealias OutboundOut = ByteBuffer
    private typealias Machine = ProviderConnectionStateMachine

    private let configuration: GatewayConfiguration
    private let dependencies: Dependencies
    /// Every access is one call into the pure machine, never overlapping another: it skips the
    /// runtime's exclusivity checks (docs/performance-log.md, "Exclusivity checks off for the
    /// machines' state").
    @exclusivity(unchecked) private var connection: Machine
    private var report: ProviderConnectionReport
    private let work: ProviderConnectionWork
    /// The client certificate, from the handshake: a reload resolves it again.
    private var certificate: NIOSSLCertificate?
    private var context: ChannelHandlerContext?
    /// Kept after the handler is removed: outcomes still arrive then, to resolve resend records.
    private var eventLoop: (any EventLoop)?
    /// The drain after an error-response, then the wait for the provider's close_notify.
    private var closeTimeout: Scheduled<Void>?
    private var graceTimeout: Scheduled<Void>?

    package init(configuration: GatewayConfiguration, dependencies: Dependencies, logger: Logger) {
        self.configuration = configuration
        self.dependencies = dependencies
        self.report = ProviderConnectionReport(logger: logger, metrics: dependencies.metrics)
        self.work = ProviderConnectionWork(dependencies: dependencies, logger: logger)
        let feedback = dependencies.feedback
        let resendRecords = dependencies.resendRecords
        self.connection = Machine(
            sessionConfiguration: configuration.session,
            mayBeOnFeedbackList: { feedback.mayBeOnList($0) },
            mayHoldResendRecords: { resendRecords.mayHoldLiveRecords(tenant: $0) }
        )
    }

    // MARK: Channel events

    package func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        self.eventLoop = context.eventLoop
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        self.cancelTimers()
        self.context = nil
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.execute(self.connection.bytesReceived(self.unwrapInboundIn(data)))
    }

    package func channelInactive(context: ChannelHandlerContext) {
        self.cancelTimers()
        self.execute(self.connection.channelInactive())
        context.fireChannelInactive()
    }

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case let verified as ProviderVerified:
            self.certificate = verified.certificate
            if case .prepare(let tenant) = self.connection.handshakeCompleted(tenant: verified.tenant) {
                self.prepare(tenant)
            }
        case let channelEvent as ChannelEvent where channelEvent == .inputClosed:
            self.execute(self.connection.inputClosed())
        case let idle as IdleStateHandler.IdleStateEvent where idle == .read:
            self.execute(self.connection.idleTimeout())
        case let shutdown as GatewayShutdownEvent:
            self.execute(self.connection.shutdownRequested(), gracePeriod: shutdown.gracePeriod)
        case is GatewayShutdownDeadlineEvent:
            self.execute(self.connection.shutdownDeadlinePassed())
        case let review as GatewayTenantReviewEvent:
            let resolved = self.certificate.flatMap { self.dependencies.tenantResolver.tenant(for: $0) }
            let outcome = self.connection.tenantReviewed(resolvesTo: resolved, remainingCredentials: review.credentials)
            self.report.tenantReviewed(outcome)
            if case .removed(_, _, let then) = outcome {
                self.execute(then, gracePeriod: review.gracePeriod)
            }
        default:
            break
        }
        context.fireUserInboundEventTriggered(event)
    }

    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A FIN without close_notify, as most legacy clients close: the same end of input as a
        // clean one (`ChannelEvent.inputClosed` follows), not a broken stream.
        guard error as? NIOSSLError != .uncleanShutdown else { return }
        // TLS failures, resets: nothing to answer on a broken stream. What was received is
        // still forwarded (channelInactive).
        self.report.logger.debug("provider connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    package func read(context: ChannelHandlerContext) {
        if self.connection.readRequested() == .read {
            context.read()
        }
    }

    // MARK: Executing the machine's actions

    private func execute(_ action: Machine.InputAction) {
        switch action {
        case .none:
            break
        case .decode:
            self.decodeFrames()
        case .decodeRemaining(let bufferedBytes, let channelGone):
            self.report.inputEnded(gone: channelGone, bufferedBytes: bufferedBytes)
            self.decodeFrames()
        case .close(let reason):
            self.close(reason)
        }
    }

    /// `gracePeriod`: how long a shutdown's grace timer runs.
    private func execute(_ action: Machine.NextAction, gracePeriod: TimeAmount? = nil) {
        switch action {
        case .none:
            break
        case .decode:
            self.decodeFrames()
        case .startGraceTimer:
            let grace = gracePeriod ?? self.configuration.shutdownGracePeriod
            self.graceTimeout = self.timer(in: grace) { self.execute(self.connection.shutdownGraceExpired()) }
        case .farewell(let farewell):
            self.sayFarewell(farewell)
        case .unannounced(let farewell):
            self.report.unannounced(farewell)
        case .close(let reason):
            self.close(reason)
        }
    }

    private func execute(_ action: Machine.CloseAction) {
        switch action {
        case .none:
            break
        case .closeOutput:
            guard let context = self.context else { return }
            context.close(mode: .output, promise: nil)
            self.closeTimeout = self.timer(in: self.closeNotifyWait) { self.execute(self.connection.closeWaitEnded()) }
        case .close(let reason):
            self.close(reason)
        }
    }

    private func execute(_ action: Machine.ShutdownDeadlineAction) {
        switch action {
        case .none:
            break
        case .farewell(let farewell, let delivery):
            self.sayFarewell(farewell)
            self.report.deliveredBeforeRecordsStored()
            self.deliver(delivery)
        case .deliver(let delivery):
            self.report.deliveredBeforeRecordsStored()
            self.deliver(delivery)
        case .unannounced(let farewell):
            self.report.unannounced(farewell)
        }
    }

    private func close(_ reason: Machine.CloseReason) {
        self.report.closing(reason, closeNotifyWaitSeconds: Double(self.closeNotifyWait.nanoseconds) / 1e9)
        self.context?.close(promise: nil)
    }

    /// The tenant is known: counters, and the resend store's view of the tenant.
    private func prepare(_ tenant: Tenant) {
        guard let context = self.context else { return }
        self.report.connected(tenant: tenant.name, usage: self.dependencies.usage)
        self.work.tenantKnown(tenant.name, on: context.eventLoop).assumeIsolated()
            .whenComplete { _ in self.execute(self.connection.storeReady()) }
    }

    /// Decodes what is buffered and does what each frame asks, for as long as the machine
    /// decodes; then a held-back read, if the session reads again.
    private func decodeFrames() {
        while let step = self.connection.nextFrameStep() {
            switch step {
            case .forward(let sequence, let notification, let claimFirst):
                let eventLoop = self.eventLoop!
                let handler = NIOLoopBound(self, eventLoop: eventLoop)
                self.work.forward(notification, sequence, claimFirst: claimFirst, on: eventLoop, to: handler)
            case .refused(let refusal, let then):
                self.report.refused(refusal, waiting: then == .none)
                self.execute(then)
            case .partialFrameDropped(let bytes):
                self.report.partialFrameDropped(bytes: bytes)
            case .close(let reason):
                self.close(reason)
            }
        }
        if self.connection.decodingPaused() == .read {
            self.context?.read()
        }
    }

    /// A forwarded notification's outcome (from ``ProviderConnectionWork``): the machine's next
    /// action first, then the store writes it asks for (their completions come after it).
    /// `remembered`: a resend's outcome taken from its record, counted and stored at its first
    /// answer.
    func outcomeArrived(
        _ outcome: NotificationOutcome,
        _ sequence: ProviderSessionStateMachine.Sequence,
        remembered: Bool
    ) {
        let completion = self.connection.outcomeArrived(sequence, outcome: outcome, remembered: remembered)
        self.report.outcome(outcome, completion, remembered: remembered)
        self.execute(completion.then)
        if let entryStored = self.work.store(completion, on: self.eventLoop!) {
            entryStored.assumeIsolated().whenSuccess { self.execute(self.connection.feedbackStored($0)) }
        }
    }

    /// docs/protocol.md#after-a-failure: remember what the provider will resend, then do what
    /// the machine says once they are stored (write the packet, then drain or close).
    private func sayFarewell(_ farewell: ProviderSessionStateMachine.Farewell) {
        self.graceTimeout?.cancel()
        self.report.farewell(farewell)
        let eventLoop = self.eventLoop!
        self.work.remember(farewell.resendRecords, on: eventLoop).assumeIsolated().whenComplete { _ in
            let stored = self.connection.farewellRecordsStored()
            self.work.resolve(stored.resolutions, on: eventLoop)
            self.deliver(stored.delivery)
        }
    }

    private func deliver(_ delivery: Machine.FarewellRecordsStored.Delivery) {
        guard let context = self.context else { return }
        switch delivery {
        case .none:
            break
        case .writeAndClose(let packet):
            self.write(packet, context: context)
            context.close(promise: nil)
        case .writeAndDrain(let packet, let read):
            // docs/protocol.md#closing: no close_notify yet, so that a client reading a little
            // late gets its packet alone (Go's TLS returns data and a close behind it together).
            self.write(packet, context: context)
            let drain = self.connection.tenant?.closing.errorDrain ?? self.configuration.errorDrainTime
            self.closeTimeout = self.timer(in: drain) { self.execute(self.connection.drainEnded()) }
            if read {
                context.read()
            }
        }
    }

    private func write(_ packet: ErrorResponsePacket?, context: ChannelHandlerContext) {
        if let packet {
            var bytes = context.channel.allocator.buffer(capacity: ErrorResponsePacket.length)
            bytes.writeErrorResponse(packet)
            context.write(self.wrapOutboundOut(bytes), promise: nil)
            self.report.errorResponseSent(packet)
        }
        context.flush()
    }

    /// The tenant's close-notify wait, or the listener's (docs/protocol.md#closing).
    private var closeNotifyWait: TimeAmount {
        self.connection.tenant?.closing.closeNotifyWait ?? self.dependencies.closeNotifyWait()
    }

    /// A timer the machine asked for: `event` runs on this loop after `delay`, unless cancelled.
    private func timer(in delay: TimeAmount, _ event: @escaping () -> Void) -> Scheduled<Void>? {
        self.eventLoop?.assumeIsolated().scheduleTask(in: delay, event)
    }

    private func cancelTimers() {
        self.closeTimeout?.cancel()
        self.graceTimeout?.cancel()
    }
}

@available(*, unavailable)
extension GatewayConnectionHandler: Sendable {}

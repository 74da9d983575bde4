import BridgeCore
import LegacyProtocol
import Logging
import NIOCore
import NIOSSL

/// The I/O edge of one provider connection: it only executes. It feeds a
/// ``ProviderConnectionStateMachine`` the channel's events (the verified tenant, bytes, reads,
/// the end of input, outcomes, store writes done, timers, shutdown, a reload's review) and does
/// the action each answers. It holds no phase and decides nothing; it keeps the I/O: the
/// context, the timers, the upstream sends, the store writes (``ProviderStoreWrites``) and what
/// an operator sees (``ProviderConnectionReport``).
///
/// Sits after the shared ``ProviderHandshakeHandler``. The machine decodes (no separate
/// `ByteToMessageHandler`), so decoding stops exactly when the session stops reading.
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
    /// From the handshake on (outcomes, and so store writes, come only after it).
    private var store: ProviderStoreWrites?
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
        if let tlsError = error as? NIOSSLError, case .uncleanShutdown = tlsError {
            // A FIN without close_notify, as most legacy clients close: the same end of input
            // as a clean one (`ChannelEvent.inputClosed` follows), not a broken stream.
            return
        }
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
            self.graceTimeout = self.eventLoop?.assumeIsolated().scheduleTask(in: grace) {
                self.execute(self.connection.shutdownGraceExpired())
            }
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
            self.closeTimeout = context.eventLoop.assumeIsolated().scheduleTask(in: self.closeNotifyWait) {
                self.execute(self.connection.closeWaitEnded())
            }
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

    /// The tenant is known: counters, the resend store's view of the tenant, the idle clock.
    private func prepare(_ tenant: Tenant) {
        guard let context = self.context else { return }
        self.report.connected(tenant: tenant.name, usage: self.dependencies.usage)
        self.store = ProviderStoreWrites(
            tenant: tenant.name,
            dependencies: self.dependencies,
            logger: self.report.logger
        )
        // Immediate for a store only this process writes; one query for a shared one, so that
        // records another instance wrote before this connection are recognised (docs/protocol.md#resend-records).
        self.dependencies.resendRecords.refreshLiveRecords(tenant: tenant.name, on: context.eventLoop)
            .hop(to: context.eventLoop).assumeIsolated()
            .whenComplete { _ in self.execute(self.connection.storeReady()) }
        // The idle clock starts now: the handshake has its own timeout, and a slow handshake
        // must not eat into the time a provider has to send its first frame.
        if let idle = self.configuration.idleTimeout {
            do {
                try context.pipeline.syncOperations.addHandler(
                    IdleStateHandler(readTimeout: idle),
                    position: .before(self)
                )
            } catch {
                self.report.logger.error("could not start the idle timer; closing", metadata: ["error": "\(error)"])
                context.close(promise: nil)
            }
        }
    }

    /// Decodes what is buffered and does what each frame asks, for as long as the machine
    /// decodes; then a held-back read, if the session reads again.
    private func decodeFrames() {
        while let step = self.connection.nextFrameStep() {
            switch step {
            case .forward(let sequence, let notification, let command, let claimFirst):
                self.dependencies.metrics.notificationReceived()
                let forwarded = Forwarded(sequence: sequence, command: command, broadcast: notification.isBroadcast)
                self.forward(notification, forwarded, claimFirst: claimFirst)
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

    /// What the handler keeps of a notification until its outcome: no more than this, so a
    /// closure waiting for the outcome holds no buffer.
    private struct Forwarded {
        var sequence: ProviderSessionStateMachine.Sequence
        var command: NotificationFrame.Command
        /// For the migration view's counts.
        var broadcast: Bool
    }

    /// Sends a notification upstream (after its resend record's claim when `claimFirst`), and
    /// gives the machine its outcome on this handler's event loop.
    private func forward(_ notification: ForwardedNotification, _ forwarded: Forwarded, claimFirst: Bool) {
        self.dependencies.metrics.forwardStarted()
        // Finished only after the outcome was handled: handling it may forward the next
        // frame, so the count never touches zero while a closed connection still drains.
        self.dependencies.inFlight.started()
        let eventLoop = self.eventLoop!
        let handler = NIOLoopBound(self, eventLoop: eventLoop)
        guard !claimFirst else {
            let forwarder = self.dependencies.forwarder
            self.dependencies.resendRecords.forwardUnlessAnswered(
                notification,
                to: forwarder,
                metrics: self.dependencies.metrics,
                pushLog: self.dependencies.pushLog,
                on: eventLoop
            )
            .hop(to: eventLoop)
            .whenSuccess { handler.value.outcomeArrived($0.outcome, forwarded, remembered: $0.remembered) }
            return
        }
        // A callback, not a future: no promise, future or callback list per notification. It
        // comes on the upstream connection's event loop (this one, while its pool has room).
        self.dependencies.forwarder.send(notification, on: eventLoop) { outcome in
            if eventLoop.inEventLoop {
                handler.value.outcomeArrived(outcome, forwarded, remembered: false)
            } else {
                eventLoop.execute { handler.value.outcomeArrived(outcome, forwarded, remembered: false) }
            }
        }
    }

    /// A forwarded notification's outcome: the machine's next action first, then the store
    /// writes it asks for (their completions come after it). `remembered`: a resend's outcome
    /// taken from its record, counted and stored at its first answer.
    private func outcomeArrived(_ outcome: NotificationOutcome, _ forwarded: Forwarded, remembered: Bool) {
        self.report.outcome(outcome, command: forwarded.command, broadcast: forwarded.broadcast, remembered: remembered)
        let completion = self.connection.outcomeArrived(forwarded.sequence, outcome: outcome, remembered: remembered)
        self.execute(completion.then)
        let eventLoop = self.eventLoop!
        if let write = completion.feedback, let stored = self.store?.apply(write, on: eventLoop),
            case .add(_, let sequence) = write
        {
            stored.assumeIsolated().whenComplete { _ in self.execute(self.connection.feedbackStored(sequence)) }
        }
        if let resolution = completion.resolution {
            self.store?.resolve([resolution], on: eventLoop)
        }
        self.dependencies.inFlight.finished()
    }

    /// docs/protocol.md#after-a-failure: remember what the provider will resend, then do what
    /// the machine says once they are stored (write the packet, then drain or close).
    private func sayFarewell(_ farewell: ProviderSessionStateMachine.Farewell) {
        self.graceTimeout?.cancel()
        self.report.farewell(farewell)
        let eventLoop = self.eventLoop!
        let stored = self.store?.remember(farewell.resendRecords, on: eventLoop) ?? eventLoop.makeSucceededVoidFuture()
        stored.assumeIsolated().whenComplete { _ in
            let stored = self.connection.farewellRecordsStored()
            self.store?.resolve(stored.resolutions, on: eventLoop)
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
            self.closeTimeout = context.eventLoop.assumeIsolated().scheduleTask(in: drain) {
                self.execute(self.connection.drainEnded())
            }
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

    private func cancelTimers() {
        self.closeTimeout?.cancel()
        self.graceTimeout?.cancel()
    }
}

@available(*, unavailable)
extension GatewayConnectionHandler: Sendable {}

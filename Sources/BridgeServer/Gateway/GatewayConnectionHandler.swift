import BridgeCore
import LegacyProtocol
import Logging
import NIOCore
import NIOSSL

// Over 400 lines, for now: the one place where a provider connection's events meet the I/O
// (the timers, the store writes and their order, the farewell's packet, the log lines). Moving
// the rules it still keeps into ProviderConnectionStateMachine, so that this file is plumbing
// only, is the open work of making the handler execute and nothing else.

/// The I/O edge of one provider connection: it only executes. It feeds a
/// ``ProviderConnectionStateMachine`` the channel's events (the verified tenant, bytes, reads,
/// the end of input, outcomes, store writes done, timers, shutdown, a reload's review) and does
/// the action each answers. It holds no phase and decides nothing; it keeps the I/O: the context,
/// the timers, the counters, and the future of the farewell's resend records.
///
/// Sits after the shared ``ProviderHandshakeHandler``. The machine decodes (no separate
/// `ByteToMessageHandler`), so decoding stops exactly when the session stops reading.
package final class GatewayConnectionHandler: ChannelDuplexHandler {
    package typealias InboundIn = ByteBuffer
    package typealias OutboundIn = ByteBuffer
    package typealias OutboundOut = ByteBuffer

    private let configuration: GatewayConfiguration
    private let dependencies: Dependencies
    private var logger: Logger
    private var connection: ProviderConnectionStateMachine
    /// The client certificate, from the handshake: a reload resolves it again.
    private var certificate: NIOSSLCertificate?
    /// The tenant's outcome counters, known from the handshake.
    private var outcomes: TenantOutcomeCounters?
    /// The tenant's usage counters (the migration view), known from the handshake.
    private var usage: TenantUsageCounters?
    private var context: ChannelHandlerContext?
    /// Kept after the handler is removed: outcomes still arrive then, to resolve resend records.
    private var eventLoop: (any EventLoop)?
    /// The drain after an error-response, then the wait for the provider's close_notify.
    private var closeTimeout: Scheduled<Void>?
    private var graceTimeout: Scheduled<Void>?
    /// Completes when the farewell's resend records are stored: their outcomes are written
    /// after it, or a shared store could see an outcome before its record.
    private var recordsStored: EventLoopFuture<Void>?

    package init(configuration: GatewayConfiguration, dependencies: Dependencies, logger: Logger) {
        self.configuration = configuration
        self.dependencies = dependencies
        self.logger = logger
        let feedback = dependencies.feedback
        let resendRecords = dependencies.resendRecords
        self.connection = ProviderConnectionStateMachine(
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
        let action = self.connection.channelInactive()
        if action == .decode {
            self.logger.debug(
                "provider connection gone",
                metadata: ["buffered_bytes": "\(self.connection.bufferedBytes)"]
            )
        }
        self.execute(action)
        context.fireChannelInactive()
    }

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case let verified as ProviderVerified:
            self.certificate = verified.certificate
            self.execute(self.connection.handshakeCompleted(tenant: verified.tenant))
        case let channelEvent as ChannelEvent where channelEvent == .inputClosed:
            let action = self.connection.inputClosed()
            if action == .decode {
                self.logger.debug(
                    "provider closed its side",
                    metadata: ["buffered_bytes": "\(self.connection.bufferedBytes)"]
                )
            }
            self.execute(action)
        case let idle as IdleStateHandler.IdleStateEvent where idle == .read:
            let action = self.connection.idleTimeout()
            if action == .close {
                self.logger.debug("closing idle provider connection")
            }
            self.execute(action)
        case let shutdown as GatewayShutdownEvent:
            self.execute(self.connection.shutdownRequested(), gracePeriod: shutdown.gracePeriod)
        case let review as GatewayTenantReviewEvent:
            self.reviewTenant(review)
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
        self.logger.debug("provider connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    package func read(context: ChannelHandlerContext) {
        self.execute(self.connection.readRequested())
    }

    // MARK: Executing the machine's actions

    /// Does what the machine answered. `gracePeriod`: how long a shutdown's grace timer runs.
    private func execute(_ action: ProviderConnectionStateMachine.Action, gracePeriod: TimeAmount? = nil) {
        switch action {
        case .none:
            break
        case .prepare(let tenant):
            self.prepare(tenant)
        case .decode:
            self.decodeFrames()
        case .read:
            self.context?.read()
        case .close:
            self.context?.close(promise: nil)
        case .startGraceTimer:
            self.graceTimeout = self.eventLoop?.assumeIsolated().scheduleTask(
                in: gracePeriod ?? self.configuration.shutdownGracePeriod
            ) {
                self.execute(self.connection.shutdownGraceExpired())
            }
        case .farewell(let farewell):
            self.sayFarewell(farewell)
        case .drain(let read):
            // docs/protocol.md#closing: no close_notify yet, so that a client reading a little
            // late gets its packet alone (Go's TLS returns data and a close behind it together).
            guard let context = self.context else { return }
            let drain = self.connection.tenant?.closing.errorDrain ?? self.configuration.errorDrainTime
            self.closeTimeout = context.eventLoop.assumeIsolated().scheduleTask(in: drain) {
                self.execute(self.connection.drainEnded())
            }
            if read {
                context.read()
            }
        case .closeOutput:
            guard let context = self.context else { return }
            context.close(mode: .output, promise: nil)
            let wait = self.connection.tenant?.closing.closeNotifyWait ?? self.dependencies.closeNotifyWait()
            self.closeTimeout = context.eventLoop.assumeIsolated().scheduleTask(in: wait) {
                let action = self.connection.closeWaitEnded()
                if action == .close {
                    // How an operator recognises a provider that only writes (docs/protocol.md#closing).
                    self.logger.info(
                        "the provider did not close after its farewell; closing the connection",
                        metadata: [
                            "bytes_dropped": "\(self.connection.bytesDroppedAfterFarewell)",
                            "close_notify_wait_seconds": "\(Double(wait.nanoseconds) / 1e9)",
                        ]
                    )
                }
                self.execute(action)
            }
        }
    }

    /// The tenant is known: counters, the resend store's view of the tenant, the idle clock.
    private func prepare(_ tenant: Tenant) {
        guard let context = self.context else { return }
        self.logger[metadataKey: "tenant"] = "\(tenant.name)"
        self.logger.debug("provider connected")
        self.outcomes = self.dependencies.metrics.outcomes(tenant: tenant.name)
        self.usage = self.dependencies.usage?.counters(tenant: tenant.name)
        // Immediate for a store only this process writes; one query for a shared one, so that
        // records another instance wrote before this connection are recognised (docs/protocol.md#resend-records).
        self.dependencies.resendRecords.refreshLiveRecords(tenant: tenant.name, on: context.eventLoop)
            .hop(to: context.eventLoop)
            .assumeIsolated()
            .whenComplete { _ in
                self.execute(self.connection.storeReady())
            }
        // The idle clock starts now: the handshake has its own timeout, and a slow handshake
        // must not eat into the time a provider has to send its first frame.
        if let idle = self.configuration.idleTimeout {
            do {
                try context.pipeline.syncOperations.addHandler(
                    IdleStateHandler(readTimeout: idle),
                    position: .before(self)
                )
            } catch {
                self.logger.error("could not start the idle timer; closing", metadata: ["error": "\(error)"])
                context.close(promise: nil)
            }
        }
    }

    /// Decodes what is buffered and does what each frame asks, for as long as the machine
    /// decodes (it stops when the session stops reading, or at a farewell); then a held-back
    /// read, if the session reads again.
    private func decodeFrames() {
        while let step = self.connection.nextFrameStep() {
            switch step {
            case .frame(let action, let command):
                self.dependencies.metrics.notificationReceived()
                self.handle(action, command: command, failureReason: "local")
            case .forwardUnlessAnswered(let sequence, let notification, let command):
                self.dependencies.metrics.notificationReceived()
                self.forward(sequence, notification, command: command, checkingResends: true)
            case .malformed(let error, let action):
                self.logger.info("refusing a malformed frame", metadata: ["error": "\(error)"])
                self.handle(action, command: nil, failureReason: "malformed")
            case .partialFrameDropped(let bytes):
                self.logger.info(
                    "provider closed the connection in the middle of a frame; that frame is not forwarded",
                    metadata: ["bytes": "\(bytes)"]
                )
                self.dependencies.metrics.partialFrameDropped()
            case .closeDrained:
                self.closeDrained()
            }
        }
        self.execute(self.connection.decodingPaused())
    }

    /// `failureReason` labels the failure metric when the frame is refused here; `command` is
    /// the frame's (`nil` when it could not be decoded).
    private func handle(
        _ action: ProviderSessionStateMachine.FrameReceivedAction,
        command: NotificationFrame.Command?,
        failureReason: String
    ) {
        switch action {
        case .forward(let sequence, let notification):
            self.forward(sequence, notification, command: command, checkingResends: false)
        case .close(let farewell):
            self.dependencies.metrics.refused(farewell.status, reason: failureReason)
            self.outcomes?.count(.rejected(farewell.status))
            self.usage?.count(command: command, .rejected(farewell.status))
            self.sayFarewell(farewell)
        case .waitForPredecessors(let status):
            self.dependencies.metrics.refused(status, reason: failureReason)
            self.outcomes?.count(.rejected(status))
            self.usage?.count(command: command, .rejected(status))
            self.logger.debug("notification failed; waiting for earlier ones", metadata: ["status": "\(status)"])
        case .ignore:
            break
        }
    }

    /// Sends a notification upstream (after its resend record's claim when `checkingResends`),
    /// and gives the machine its outcome.
    private func forward(
        _ sequence: ProviderSessionStateMachine.Sequence,
        _ notification: UpstreamNotification,
        command: NotificationFrame.Command?,
        checkingResends: Bool
    ) {
        self.dependencies.metrics.forwardStarted()
        let eventLoop = self.eventLoop!
        // For the migration view; read now, so the closure below holds no more than a flag.
        let broadcast = notification.isBroadcast
        // Finished only after the outcome was handled: handling it may forward the next
        // frame, so the count never touches zero while a closed connection still drains.
        self.dependencies.inFlight.started()
        let handler = NIOLoopBound(self, eventLoop: eventLoop)
        guard !checkingResends else {
            // A possible resend: a claim first, a future per notification (only while the
            // tenant may hold live records, after an error or a shutdown).
            self.dependencies.resendRecords.forwardUnlessAnswered(
                notification,
                to: self.dependencies.upstream,
                metrics: self.dependencies.metrics,
                on: eventLoop
            ).hop(to: eventLoop).whenSuccess { answer in
                handler.value.outcomeArrived(
                    answer.outcome,
                    sequence,
                    command: command,
                    broadcast: broadcast,
                    remembered: answer.remembered
                )
            }
            return
        }
        // The outcome comes back on the upstream connection's event loop (this one, while its
        // pool has room), and the handler is touched on its own loop only. A callback, not a
        // future: no promise, future or callback list per notification.
        self.dependencies.upstream.send(notification, on: eventLoop) { outcome in
            if eventLoop.inEventLoop {
                handler.value.outcomeArrived(outcome, sequence, command: command, broadcast: broadcast)
            } else {
                eventLoop.execute {
                    handler.value.outcomeArrived(outcome, sequence, command: command, broadcast: broadcast)
                }
            }
        }
    }

    /// A forwarded notification's outcome, on this handler's event loop. `remembered`: a
    /// resend's outcome taken from its record, not a new answer: it is not counted again, and
    /// changes no feedback list (its first answer did; writing a 410 again would put back an
    /// entry a poller may have taken since).
    private func outcomeArrived(
        _ outcome: NotificationOutcome,
        _ sequence: ProviderSessionStateMachine.Sequence,
        command: NotificationFrame.Command?,
        broadcast: Bool,
        remembered: Bool = false
    ) {
        self.dependencies.metrics.forwardFinished()
        if !remembered {
            self.outcomes?.count(outcome)
        }
        self.usage?.count(command: command, outcome, broadcast: broadcast)
        self.upstreamCompleted(sequence, outcome: outcome, remembered: remembered)
        self.dependencies.inFlight.finished()
    }

    /// Stores what the machine says an outcome changes, then does what comes next.
    private func upstreamCompleted(
        _ sequence: ProviderSessionStateMachine.Sequence,
        outcome: NotificationOutcome,
        remembered: Bool
    ) {
        let completion = self.connection.upstreamCompleted(sequence, outcome: outcome)
        let eventLoop = self.eventLoop!
        var entryStored: EventLoopFuture<Void>?
        if remembered, let write = completion.feedback {
            // Already on the list (or taken off it) by the first answer.
            if case .add = write {
                entryStored = eventLoop.makeSucceededVoidFuture()
            }
        } else if let write = completion.feedback {
            let stored = self.dependencies.feedback.apply(write.change, on: eventLoop)
            self.dependencies.inFlight.track(stored)
            if case .add(let entry, _) = write {
                let token = LogRedaction.token(entry.deviceToken)
                self.logger.debug("token unregistered upstream", metadata: ["token": "\(token)"])
                stored.whenSuccess { [logger, metrics = self.dependencies.metrics] in
                    metrics.feedbackEntryRecorded()
                    logger.debug("feedback entry stored", metadata: ["token": "\(token)"])
                }
                entryStored = stored
            }
            stored.whenFailure { [logger] error in
                logger.error("could not store a feedback change", metadata: ["error": "\(error)"])
            }
        }
        if let record = completion.resolvedRecord, let outcome = record.outcome, let tenant = self.connection.tenant {
            let key = ResendRecordKey(tenant: tenant.name, frame: record.frame)
            let store = self.dependencies.resendRecords
            let resolved = (self.recordsStored ?? eventLoop.makeSucceededVoidFuture())
                .flatMapError { _ in eventLoop.makeSucceededVoidFuture() }
                .flatMap { store.resolve(key, outcome: outcome, on: eventLoop) }
            self.dependencies.inFlight.track(resolved)
            resolved.whenFailure { [logger] error in
                logger.error("could not store a resend record's outcome", metadata: ["error": "\(error)"])
            }
        }
        self.executeAfterOutcome(completion.then)
        // A 410's notification is done once its feedback entry is committed (or could not be).
        // Registered last: the future may be complete already, and its callback then runs now.
        entryStored?.hop(to: eventLoop).assumeIsolated().whenComplete { _ in
            self.executeAfterOutcome(self.connection.feedbackStored(sequence))
        }
    }

    /// After an outcome, a `.close` means the provider's input was read to its end and every
    /// notification answered.
    private func executeAfterOutcome(_ action: ProviderConnectionStateMachine.Action) {
        if action == .close {
            self.closeDrained()
        } else {
            self.execute(action)
        }
    }

    /// Every frame the provider sent before it closed its side has an outcome.
    private func closeDrained() {
        self.logger.debug("provider input read to its end and every notification answered; closing")
        self.context?.close(promise: nil)
    }

    /// A reload: the certificate is resolved against the new tenants, and the machine decides.
    private func reviewTenant(_ review: GatewayTenantReviewEvent) {
        let resolved = self.certificate.flatMap { self.dependencies.tenantResolver.tenant(for: $0) }
        switch self.connection.tenantReviewed(resolvesTo: resolved, remainingCredentials: review.credentials) {
        case .unchanged:
            break
        case .channelsChanged(let channels):
            self.logger.info(
                "the reloaded configuration changed this tenant's channels",
                metadata: ["channels": "\(channels.count)"]
            )
        case .removed(let tenantResolves, let credentialsRemain, let then):
            self.logger.notice(
                "the reloaded configuration removed this connection's tenant or its credentials; closing it with status 10",
                metadata: ["tenant_resolves": "\(tenantResolves)", "credentials_remain": "\(credentialsRemain)"]
            )
            self.execute(then, gracePeriod: review.gracePeriod)
        }
    }

    /// docs/protocol.md#after-a-failure: remember what the provider will resend, then write the
    /// packet, flush, and do what the machine says (close at once when the provider's input has
    /// ended; else read and drop what still arrives for the drain, then send close_notify and
    /// FIN and wait for the provider's close). The machine is already draining: it decided the
    /// farewell.
    ///
    /// When the connection is already gone, nobody can be told and nobody will resend: the
    /// failure is logged and counted, and no records are made.
    private func sayFarewell(_ farewell: ProviderSessionStateMachine.Farewell) {
        self.graceTimeout?.cancel()
        guard let context = self.context, context.channel.isActive, let tenant = self.connection.tenant?.name else {
            self.connection.channelClosed()
            if farewell.status != .shutdown {
                self.dependencies.metrics.failureAfterClose()
                self.logger.warning(
                    "notification failed after the provider closed its connection; nobody to tell",
                    metadata: [
                        "status": "\(farewell.status)",
                        "packet": "\(farewell.packet.map { "\($0)" } ?? "none (command 0)")",
                    ]
                )
            }
            return
        }
        if farewell.status == .shutdown {
            self.logger.info(
                "closing provider connection for shutdown",
                metadata: ["packet": "\(farewell.packet.map { "\($0)" } ?? "none")"]
            )
        } else {
            self.logger.info(
                "notification failed; closing provider connection",
                metadata: [
                    "status": "\(farewell.status)",
                    "packet": "\(farewell.packet.map { "\($0)" } ?? "none (command 0)")",
                    "resend_records": "\(farewell.resendRecords.count)",
                ]
            )
        }

        let records = farewell.resendRecords.map {
            ResendRecord(
                key: ResendRecordKey(tenant: tenant, frame: $0.frame),
                outcome: $0.outcome,
                notificationID: $0.id
            )
        }
        let stored =
            records.isEmpty
            ? context.eventLoop.makeSucceededVoidFuture()
            : self.dependencies.resendRecords.remember(records, on: context.eventLoop)
        self.recordsStored = stored
        self.dependencies.inFlight.track(stored)
        stored.hop(to: context.eventLoop).assumeIsolated().whenComplete { result in
            if case .failure(let error) = result {
                self.logger.error(
                    "could not store resend records; resends may be duplicated",
                    metadata: ["error": "\(error)"]
                )
            }
            guard let context = self.context, context.channel.isActive else { return }
            if let packet = farewell.packet {
                var bytes = context.channel.allocator.buffer(capacity: ErrorResponsePacket.length)
                bytes.writeErrorResponse(packet)
                context.write(self.wrapOutboundOut(bytes), promise: nil)
                self.dependencies.metrics.errorResponseSent(packet.status)
            }
            context.flush()
            self.execute(self.connection.farewellRecordsStored())
        }
    }

    private func cancelTimers() {
        self.closeTimeout?.cancel()
        self.graceTimeout?.cancel()
    }
}

@available(*, unavailable)
extension GatewayConnectionHandler: Sendable {}

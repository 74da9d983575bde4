import BridgeCore
import LegacyProtocol
import Logging
import NIOCore
import NIOSSL
import NIOTLS

/// Sent down a gateway connection's pipeline to start the graceful shutdown of CONTRACT §1.8.
struct GatewayShutdownEvent: Sendable {
    var gracePeriod: TimeAmount
}

/// Sent down a gateway connection's pipeline after a configuration reload: a connection whose
/// certificate no longer resolves to a tenant closes as at shutdown.
struct GatewayTenantReviewEvent: Sendable {
    var gracePeriod: TimeAmount
    /// The upstream credentials that remain.
    var credentials: Set<String>
}

/// The I/O edge of one provider connection: a thin adapter around a
/// ``ProviderConnectionStateMachine``. It feeds the machine the channel's events (bytes, reads,
/// the TLS handshake, the end of input, outcomes, shutdown) and does what the machine answers:
/// forward, write a farewell, read, close. It holds no phase of its own; what it keeps is I/O:
/// the context, the timers, the counters, and the future of the farewell's resend records.
///
/// Sits after the `NIOSSLServerHandler`. Decoding happens in the machine rather than in a
/// separate `ByteToMessageHandler` so that decoding stops exactly when the session stops
/// reading: what is not decoded stays buffered, and no more is read from the socket.
final class GatewayConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    struct Dependencies: Sendable {
        var dispatcher: NotificationDispatcher
        var feedback: any FeedbackRecorder
        var tenantResolver: any TenantResolver
        /// The gateway's unfinished work, which graceful shutdown waits for.
        var inFlight: InFlightWork
        /// The migration view's counts (`nil`: not kept).
        var usage: UsageRecorder?
    }

    private let configuration: GatewayConfiguration
    private let dependencies: Dependencies
    private var logger: Logger
    private var connection: ProviderConnectionStateMachine
    /// The tenant's outcome counters, known from the handshake.
    private var outcomes: TenantOutcomeCounters?
    /// The tenant's usage counters (the migration view), known from the handshake.
    private var usage: TenantUsageCounters?
    private var context: ChannelHandlerContext?
    /// Kept after the handler is removed: outcomes still arrive then, to resolve resend records.
    private var eventLoop: (any EventLoop)?
    private var handshakeTimeout: Scheduled<Void>?
    private var drainTimeout: Scheduled<Void>?
    private var graceTimeout: Scheduled<Void>?
    /// Completes when the farewell's resend records are stored: their outcomes are written
    /// after it, or a shared store could see an outcome before its record.
    private var recordsStored: EventLoopFuture<Void>?

    init(configuration: GatewayConfiguration, dependencies: Dependencies, logger: Logger) {
        self.configuration = configuration
        self.dependencies = dependencies
        self.logger = logger
        self.connection = ProviderConnectionStateMachine(sessionConfiguration: configuration.session)
    }

    // MARK: Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        self.eventLoop = context.eventLoop
        if context.channel.isActive {
            self.startHandshakeTimer(context: context)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.cancelTimers()
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        self.startHandshakeTimer(context: context)
        context.fireChannelActive()
    }

    private func startHandshakeTimer(context: ChannelHandlerContext) {
        guard self.handshakeTimeout == nil else { return }
        self.handshakeTimeout = context.eventLoop.assumeIsolated().scheduleTask(in: self.configuration.handshakeTimeout) {
            guard self.connection.isHandshaking else { return }
            self.logger.debug("TLS handshake timed out")
            self.context?.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if self.connection.bytesReceived(self.unwrapInboundIn(data)) {
            self.decodeFrames()
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.cancelTimers()
        if self.connection.channelInactive() {
            self.logger.debug("provider connection gone", metadata: ["buffered_bytes": "\(self.connection.bufferedBytes)"])
            self.decodeFrames()
        }
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted = tlsEvent {
            self.handshakeCompleted(context: context)
        } else if let channelEvent = event as? ChannelEvent, channelEvent == .inputClosed {
            switch self.connection.inputClosed() {
            case .decode:
                self.logger.debug("provider closed its side", metadata: ["buffered_bytes": "\(self.connection.bufferedBytes)"])
                self.decodeFrames()
            case .close:
                context.close(promise: nil)
            case .none:
                break
            }
        } else if let idle = event as? IdleStateHandler.IdleStateEvent, idle == .read {
            if self.connection.isIdle {
                self.logger.debug("closing idle provider connection")
                context.close(promise: nil)
            }
        } else if let shutdown = event as? GatewayShutdownEvent {
            self.beginShutdown(context: context, gracePeriod: shutdown.gracePeriod)
        } else if let review = event as? GatewayTenantReviewEvent {
            self.reviewTenant(context: context, review)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
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

    func read(context: ChannelHandlerContext) {
        if self.connection.readRequested() {
            context.read()
        }
    }

    // MARK: Executing the machine's actions

    private func handshakeCompleted(context: ChannelHandlerContext) {
        self.handshakeTimeout?.cancel()
        self.handshakeTimeout = nil
        let certificate = try? context.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self).peerCertificate
        let tenant = certificate.flatMap { self.dependencies.tenantResolver.tenant(for: $0) }
        switch self.connection.handshakeCompleted(tenant: tenant) {
        case .refuse:
            self.logger.warning("refusing provider connection: no tenant for its client certificate")
            context.close(promise: nil)
            return
        case .ignore:
            return
        case .prepare:
            break
        }
        guard let tenant else { return }
        self.logger[metadataKey: "tenant"] = "\(tenant.name)"
        self.logger.debug("provider connected")
        self.outcomes = GatewayMetrics.shared.outcomes(tenant: tenant.name)
        if let usage = self.dependencies.usage {
            self.usage = usage.counters(tenant: tenant.name)
            usage.connected(tenant: tenant.name, context: context, certificate: certificate, feedback: false)
        }
        // Immediate for a store only this process writes; one query for a shared one, so that
        // records another instance wrote before this connection are recognised (§1.6).
        self.dependencies.dispatcher.resendRecords.refreshLiveRecords(tenant: tenant.name, on: context.eventLoop)
            .hop(to: context.eventLoop)
            .assumeIsolated()
            .whenComplete { _ in
                guard self.connection.storeReady() else { return }
                self.decodeFrames()
                self.resumeReadingIfWanted()
            }
        // The idle clock starts now: the handshake has its own timeout, and a slow handshake
        // must not eat into the time a provider has to send its first frame.
        if let idle = self.configuration.idleTimeout {
            do {
                try context.pipeline.syncOperations.addHandler(IdleStateHandler(readTimeout: idle), position: .before(self))
            } catch {
                self.logger.error("could not start the idle timer; closing", metadata: ["error": "\(error)"])
                context.close(promise: nil)
            }
        }
    }

    /// Decodes what is buffered and does what each frame asks, for as long as the machine
    /// decodes (it stops when the session stops reading, or at a farewell).
    private func decodeFrames() {
        while let step = self.connection.nextFrameStep() {
            switch step {
            case .frame(let action, let command):
                GatewayMetrics.shared.notificationReceived()
                self.handle(action, command: command, failureReason: "local")
            case .malformed(let error, let action):
                self.logger.info("refusing a malformed frame", metadata: ["error": "\(error)"])
                self.handle(action, command: nil, failureReason: "malformed")
            case .partialFrameDropped(let bytes):
                self.logger.info(
                    "provider closed the connection in the middle of a frame; that frame is not forwarded",
                    metadata: ["bytes": "\(bytes)"]
                )
                GatewayMetrics.shared.partialFrameDropped()
            case .closeDrained:
                self.closeDrained()
            }
        }
    }

    /// `failureReason` labels the failure metric when the frame is refused here; `command` is
    /// the frame's (`nil` when it could not be decoded).
    private func handle(_ action: ProviderSessionStateMachine.FrameReceivedAction, command: NotificationFrame.Command?, failureReason: String) {
        switch action {
        case .forward(let sequence, let notification):
            GatewayMetrics.shared.forwardStarted()
            let eventLoop = self.eventLoop!
            // For the migration view; decided now, so the closure below holds no more than a flag.
            let channels = notification.tenant.channels
            let broadcast = !channels.isEmpty && channels.channel(forToken: notification.frame.deviceToken) != nil
            // Finished only after the outcome was handled: handling it may forward the next
            // frame, so the count never touches zero while a closed connection still drains.
            self.dependencies.inFlight.started()
            self.dependencies.dispatcher.dispatch(notification, on: eventLoop)
                .hop(to: eventLoop)
                .assumeIsolated()
                .whenSuccess { outcome in
                    GatewayMetrics.shared.forwardFinished()
                    self.outcomes?.count(outcome)
                    self.usage?.count(command: command, outcome, broadcast: broadcast)
                    self.upstreamCompleted(sequence, outcome: outcome)
                    self.dependencies.inFlight.finished()
                }
        case .close(let farewell):
            GatewayMetrics.shared.refused(farewell.status, reason: failureReason)
            self.outcomes?.count(.rejected(farewell.status))
            self.usage?.count(command: command, .rejected(farewell.status))
            self.sayFarewell(farewell)
        case .waitForPredecessors(let status):
            GatewayMetrics.shared.refused(status, reason: failureReason)
            self.outcomes?.count(.rejected(status))
            self.usage?.count(command: command, .rejected(status))
            self.logger.debug("notification failed; waiting for earlier ones", metadata: ["status": "\(status)"])
        case .ignore:
            break
        }
    }

    private func upstreamCompleted(_ sequence: ProviderSessionStateMachine.Sequence, outcome: NotificationOutcome) {
        guard let action = self.connection.upstreamCompleted(sequence, outcome: outcome) else { return }
        let eventLoop = self.eventLoop!
        var entryStored: EventLoopFuture<Void>?

        // A 200 for a token on no feedback list (almost every 200) changes nothing in the store.
        if let change = action.feedback, case .registered(let key) = change, !self.dependencies.feedback.mayBeOnList(key) {
            // Nothing to remove.
        } else if let change = action.feedback {
            let stored = self.dependencies.feedback.apply(change, on: eventLoop)
            self.dependencies.inFlight.track(stored)
            if case .unregistered(let entry) = change {
                let token = LogRedaction.token(entry.deviceToken)
                self.logger.debug("token unregistered upstream", metadata: ["token": "\(token)"])
                stored.whenSuccess { [logger] in
                    GatewayMetrics.shared.feedbackEntryRecorded()
                    logger.debug("feedback entry stored", metadata: ["token": "\(token)"])
                }
                entryStored = stored
            }
            stored.whenFailure { [logger] error in
                logger.error("could not store a feedback change", metadata: ["error": "\(error)"])
            }
        }
        if let record = action.resolvedRecord, let outcome = record.outcome, let tenant = self.connection.tenant {
            let key = ResendRecordKey(tenant: tenant.name, frame: record.frame)
            let store = self.dependencies.dispatcher.resendRecords
            let resolved = (self.recordsStored ?? eventLoop.makeSucceededVoidFuture())
                .flatMapError { _ in eventLoop.makeSucceededVoidFuture() }
                .flatMap { store.resolve(key, outcome: outcome, on: eventLoop) }
            self.dependencies.inFlight.track(resolved)
            resolved.whenFailure { [logger] error in
                logger.error("could not store a resend record's outcome", metadata: ["error": "\(error)"])
            }
        }
        self.proceed(after: action)
        // A 410's notification is done once its feedback entry is committed (or could not be).
        // Registered last: the future may be complete already, and its callback then runs now.
        entryStored?.hop(to: eventLoop).assumeIsolated().whenComplete { _ in
            guard let next = self.connection.feedbackStored(sequence) else { return }
            self.proceed(after: next)
        }
    }

    /// After a notification became done: the farewell it decided, the close of a drained
    /// connection, or more frames from the buffer and the socket.
    private func proceed(after action: ProviderSessionStateMachine.UpstreamCompletedAction) {
        if let farewell = action.farewell {
            self.sayFarewell(farewell)
        } else if action.closeDrained {
            self.closeDrained()
        } else {
            self.decodeFrames()
            self.resumeReadingIfWanted()
        }
    }

    private func resumeReadingIfWanted() {
        guard let context = self.context, self.connection.resumeReading() else { return }
        context.read()
    }

    /// Every frame the provider sent before it closed its side has an outcome.
    private func closeDrained() {
        self.logger.debug("provider input read to its end and every notification answered; closing")
        self.context?.close(promise: nil)
    }

    private func beginShutdown(context: ChannelHandlerContext, gracePeriod: TimeAmount) {
        switch self.connection.shutdownRequested() {
        case .close:
            context.close(promise: nil)
        case .farewell(let farewell):
            self.sayFarewell(farewell)
        case .startGraceTimer:
            self.graceTimeout = context.eventLoop.assumeIsolated().scheduleTask(in: gracePeriod) {
                if let farewell = self.connection.shutdownGraceExpired() {
                    self.sayFarewell(farewell)
                }
            }
        case .none:
            break
        }
    }

    /// A reload removed tenants or credentials: if this connection's certificate no longer
    /// resolves, or its tenant's credentials are gone, it is closed with status 10 once what is
    /// in flight is answered (or the grace period ends). A tenant whose channels changed keeps
    /// its connection and reads its next frames with the new channels.
    private func reviewTenant(context: ChannelHandlerContext, _ review: GatewayTenantReviewEvent) {
        // A handshake in progress is checked against the new tenants anyway.
        guard self.connection.isReviewable else { return }
        let certificate = try? context.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self).peerCertificate
        let resolved = certificate.flatMap { self.dependencies.tenantResolver.tenant(for: $0) }
        let stillResolves = resolved != nil
        let credentialsRemain = self.connection.tenant?.credentials.map { review.credentials.contains($0) } ?? true
        if let resolved, credentialsRemain, let current = self.connection.tenant {
            if resolved.name == current.name, resolved.channels != current.channels {
                self.connection.tenantChannelsChanged(resolved.channels)
                self.logger.info("the reloaded configuration changed this tenant's channels", metadata: ["channels": "\(resolved.channels.count)"])
            }
        }
        guard !stillResolves || !credentialsRemain else { return }
        self.logger.notice(
            "the reloaded configuration removed this connection's tenant or its credentials; closing it with status 10",
            metadata: ["tenant_resolves": "\(stillResolves)", "credentials_remain": "\(credentialsRemain)"]
        )
        self.beginShutdown(context: context, gracePeriod: review.gracePeriod)
    }

    /// §1.5: remember what the provider will resend, then write the packet, flush, send
    /// close_notify and FIN, read and drop what still arrives for a moment, and close. (The
    /// machine is already draining: it decided the farewell.)
    ///
    /// When the connection is already gone, nobody can be told and nobody will resend: the
    /// failure is logged and counted, and no records are made.
    private func sayFarewell(_ farewell: ProviderSessionStateMachine.Farewell) {
        self.graceTimeout?.cancel()
        guard let context = self.context, context.channel.isActive, let tenant = self.connection.tenant?.name else {
            self.connection.channelClosed()
            if farewell.status != .shutdown {
                GatewayMetrics.shared.failureAfterClose()
                self.logger.warning(
                    "notification failed after the provider closed its connection; nobody to tell",
                    metadata: ["status": "\(farewell.status)", "packet": "\(farewell.packet.map { "\($0)" } ?? "none (command 0)")"]
                )
            }
            return
        }
        if farewell.status == .shutdown {
            self.logger.info("closing provider connection for shutdown", metadata: ["packet": "\(farewell.packet.map { "\($0)" } ?? "none")"])
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
            ResendRecord(key: ResendRecordKey(tenant: tenant, frame: $0.frame), outcome: $0.outcome)
        }
        let stored =
            records.isEmpty
            ? context.eventLoop.makeSucceededVoidFuture()
            : self.dependencies.dispatcher.resendRecords.remember(records, on: context.eventLoop)
        self.recordsStored = stored
        self.dependencies.inFlight.track(stored)
        stored.hop(to: context.eventLoop).assumeIsolated().whenComplete { result in
            if case .failure(let error) = result {
                self.logger.error("could not store resend records; resends may be duplicated", metadata: ["error": "\(error)"])
            }
            guard let context = self.context, context.channel.isActive else { return }
            if let packet = farewell.packet {
                var bytes = context.channel.allocator.buffer(capacity: ErrorResponsePacket.length)
                bytes.writeErrorResponse(packet)
                context.write(self.wrapOutboundOut(bytes), promise: nil)
                GatewayMetrics.shared.errorResponseSent(packet.status)
            }
            context.flush()
            if self.connection.isInputClosed {
                // Nothing more will arrive to drain: close once the packet is out.
                context.close(promise: nil)
                return
            }
            context.close(mode: .output, promise: nil)
            self.drainTimeout = context.eventLoop.assumeIsolated().scheduleTask(in: self.configuration.errorDrainTime) {
                self.context?.close(promise: nil)
            }
            if self.connection.takePendingRead() {
                context.read()
            }
        }
    }

    private func cancelTimers() {
        self.handshakeTimeout?.cancel()
        self.drainTimeout?.cancel()
        self.graceTimeout?.cancel()
    }
}

@available(*, unavailable)
extension GatewayConnectionHandler: Sendable {}

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

/// The I/O edge of one provider connection: it decodes frames, feeds them and the upstream's
/// outcomes into a ``ProviderSessionStateMachine``, and does what the machine says.
///
/// Sits after the `NIOSSLServerHandler`. Decoding happens here rather than in a separate
/// `ByteToMessageHandler` so that decoding stops exactly when the session stops reading:
/// what is not decoded stays in `buffered`, and no more is read from the socket.
final class GatewayConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    struct Dependencies: Sendable {
        var dispatcher: NotificationDispatcher
        var feedback: any FeedbackRecorder
        var tenantResolver: any TenantResolver
    }

    private enum Phase {
        /// Waiting for the TLS handshake (and so for the tenant).
        case handshaking
        case open
        /// The farewell is being written; whatever arrives is read and dropped.
        case draining
        case closed
    }

    private let configuration: GatewayConfiguration
    private let dependencies: Dependencies
    private var logger: Logger
    private var phase = Phase.handshaking
    private var session: ProviderSessionStateMachine?
    private var decoder = NotificationFrameDecoder()
    private var buffered = ByteBuffer()
    private var readPending = false
    private var context: ChannelHandlerContext?
    /// Kept after the handler is removed: outcomes still arrive then, to resolve resend records.
    private var eventLoop: (any EventLoop)?
    private var handshakeTimeout: Scheduled<Void>?
    private var drainTimeout: Scheduled<Void>?
    private var graceTimeout: Scheduled<Void>?

    init(configuration: GatewayConfiguration, dependencies: Dependencies, logger: Logger) {
        self.configuration = configuration
        self.dependencies = dependencies
        self.logger = logger
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
            guard case .handshaking = self.phase else { return }
            self.logger.debug("TLS handshake timed out")
            self.context?.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var incoming = self.unwrapInboundIn(data)
        switch self.phase {
        case .open:
            if self.buffered.readableBytes == 0 {
                self.buffered = incoming
            } else {
                // Compact once per read, not once per frame: forwarded frames hold slices of
                // the storage, so compacting copies what is left into new storage.
                self.buffered.discardReadBytes()
                self.buffered.writeBuffer(&incoming)
            }
            self.processBufferedFrames(context: context)
        case .handshaking, .draining, .closed:
            break  // after a farewell, frames are dropped (§1.5)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if case .open = self.phase, self.buffered.readableBytes > 0 {
            // §1.4: a frame cut off by the end of the connection is not forwarded.
            self.logger.info(
                "provider closed the connection in the middle of a frame; nothing forwarded from it",
                metadata: ["bytes": "\(self.buffered.readableBytes)"]
            )
        }
        self.phase = .closed
        self.buffered = ByteBuffer()
        self.session?.inputClosed()
        self.cancelTimers()
        context.fireChannelInactive()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted = tlsEvent {
            self.handshakeCompleted(context: context)
        } else if let idle = event as? IdleStateHandler.IdleStateEvent, idle == .read {
            if case .open = self.phase, self.session?.isIdle == true {
                self.logger.debug("closing idle provider connection")
                context.close(promise: nil)
            }
        } else if let shutdown = event as? GatewayShutdownEvent {
            self.beginShutdown(context: context, gracePeriod: shutdown.gracePeriod)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // TLS failures, resets: nothing to answer on a broken stream.
        self.logger.debug("provider connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    func read(context: ChannelHandlerContext) {
        let wantsData: Bool
        switch self.phase {
        case .handshaking, .draining: wantsData = true
        case .open: wantsData = self.session?.isReading ?? false
        case .closed: wantsData = false
        }
        if wantsData {
            context.read()
        } else {
            self.readPending = true
        }
    }

    // MARK: Session

    private func handshakeCompleted(context: ChannelHandlerContext) {
        self.handshakeTimeout?.cancel()
        self.handshakeTimeout = nil
        let certificate = try? context.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self).peerCertificate
        guard let certificate, let tenant = self.dependencies.tenantResolver.tenant(for: certificate) else {
            self.logger.warning("refusing provider connection: no tenant for its client certificate")
            context.close(promise: nil)
            return
        }
        self.logger[metadataKey: "tenant"] = "\(tenant.name)"
        self.logger.debug("provider connected")
        self.session = ProviderSessionStateMachine(tenant: tenant, configuration: self.configuration.session)
        self.phase = .open
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

    private func processBufferedFrames(context: ChannelHandlerContext) {
        while case .open = self.phase, self.session!.isReading {
            let action: ProviderSessionStateMachine.FrameReceivedAction
            let failureReason: String
            do {
                guard let frame = try self.decoder.decode(buffer: &self.buffered) else { break }
                GatewayMetrics.shared.notificationReceived()
                action = self.session!.frameReceived(frame)
                failureReason = "local"
            } catch let error as LegacyProtocolError {
                self.logger.info("refusing a malformed frame", metadata: ["error": "\(error)"])
                self.buffered = ByteBuffer()
                action = self.session!.decodeFailed(error)
                failureReason = "malformed"
            } catch {
                preconditionFailure("the decoder throws LegacyProtocolError only: \(error)")
            }
            self.handle(action, failureReason: failureReason, context: context)
        }
        if self.buffered.readableBytes == 0 {
            // Let go of the storage (forwarded frames may still hold slices of it), so the next
            // read is adopted without a copy. Frames left over stay where they are until the
            // next read (see channelRead): compacting here would copy them at every outcome.
            self.buffered = ByteBuffer()
        }
    }

    /// `failureReason` labels the failure metric when the frame is refused here.
    private func handle(_ action: ProviderSessionStateMachine.FrameReceivedAction, failureReason: String, context: ChannelHandlerContext) {
        switch action {
        case .forward(let sequence, let notification):
            GatewayMetrics.shared.forwardStarted()
            self.dependencies.dispatcher.dispatch(notification, on: context.eventLoop)
                .hop(to: context.eventLoop)
                .assumeIsolated()
                .whenSuccess { outcome in
                    GatewayMetrics.shared.forwardFinished()
                    self.upstreamCompleted(sequence, outcome: outcome)
                }
        case .close(let farewell):
            GatewayMetrics.shared.refused(farewell.status, reason: failureReason)
            self.sayFarewell(farewell, context: context)
        case .waitForPredecessors(let status):
            GatewayMetrics.shared.refused(status, reason: failureReason)
            self.logger.debug("notification failed; waiting for earlier ones", metadata: ["status": "\(status)"])
        case .ignore:
            break
        }
    }

    private func upstreamCompleted(_ sequence: ProviderSessionStateMachine.Sequence, outcome: NotificationOutcome) {
        guard self.session != nil else { return }
        // Mutated in place: a copy taken out and stored back would copy the whole in-flight
        // window (its storage is shared while both exist) at every outcome.
        // No local copy afterwards either: one alive while processBufferedFrames appends to the
        // window would make that append copy it.
        let action = self.session!.upstreamCompleted(sequence, outcome: outcome)
        let eventLoop = self.eventLoop!

        if let change = action.feedback {
            let stored = self.dependencies.feedback.apply(change, on: eventLoop)
            if case .unregistered(let entry) = change {
                let token = LogRedaction.token(entry.deviceToken)
                self.logger.debug("token unregistered upstream", metadata: ["token": "\(token)"])
                stored.whenSuccess { [logger] in
                    GatewayMetrics.shared.feedbackEntryRecorded()
                    logger.debug("feedback entry stored", metadata: ["token": "\(token)"])
                }
            }
            stored.whenFailure { [logger] error in
                logger.error("could not store a feedback change", metadata: ["error": "\(error)"])
            }
        }
        if let record = action.resolvedRecord, let outcome = record.outcome {
            let key = ResendRecordKey(tenant: self.session!.tenant.name, frame: record.frame)
            self.dependencies.dispatcher.resendRecords.resolve(key, outcome: outcome, on: eventLoop).whenFailure { [logger] error in
                logger.error("could not store a resend record's outcome", metadata: ["error": "\(error)"])
            }
        }
        guard let context = self.context else { return }
        if let farewell = action.farewell {
            self.sayFarewell(farewell, context: context)
        } else if case .open = self.phase, self.session!.isReading {
            self.processBufferedFrames(context: context)
            if self.readPending, case .open = self.phase, self.session!.isReading {
                self.readPending = false
                context.read()
            }
        }
    }

    private func beginShutdown(context: ChannelHandlerContext, gracePeriod: TimeAmount) {
        switch self.phase {
        case .handshaking:
            context.close(promise: nil)
        case .open:
            if let farewell = self.session!.shutdownRequested() {
                self.sayFarewell(farewell, context: context)
                return
            }
            self.graceTimeout = context.eventLoop.assumeIsolated().scheduleTask(in: gracePeriod) {
                guard let context = self.context, case .open = self.phase else { return }
                if let farewell = self.session!.shutdownGraceExpired() {
                    self.sayFarewell(farewell, context: context)
                }
            }
        case .draining, .closed:
            break
        }
    }

    /// §1.5: remember what the provider will resend, then write the packet, flush, send
    /// close_notify and FIN, read and drop what still arrives for a moment, and close.
    private func sayFarewell(_ farewell: ProviderSessionStateMachine.Farewell, context: ChannelHandlerContext) {
        self.phase = .draining
        self.buffered = ByteBuffer()
        self.graceTimeout?.cancel()
        let tenant = self.session!.tenant.name
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
            context.close(mode: .output, promise: nil)
            self.drainTimeout = context.eventLoop.assumeIsolated().scheduleTask(in: self.configuration.errorDrainTime) {
                self.context?.close(promise: nil)
            }
            if self.readPending {
                self.readPending = false
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

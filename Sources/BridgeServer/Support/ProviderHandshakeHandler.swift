import BridgeCore
import Logging
import NIOCore
import NIOSSL
import NIOTLS
import Synchronization

/// The handshake half of both legacy ports, between NIOSSL and the port's handler: counts the
/// connection among the handshakes in progress until its handshake completes, closes it when
/// the handshake takes longer than `timeout`, and then takes the tenant the certificate
/// verifier resolved, reports the handshake to the migration view, sends ``ProviderVerified``
/// down the pipeline and removes itself.
package final class ProviderHandshakeHandler: ChannelInboundHandler, RemovableChannelHandler {
    package typealias InboundIn = ByteBuffer
    package typealias InboundOut = ByteBuffer

    package enum Port: Sendable {
        case gateway
        case feedback
    }

    private let peer: VerifiedPeer
    private let registry: ConnectionRegistry?
    private let timeout: TimeAmount
    /// The gateway's idle timeout (`nil`: none), which starts when the handshake ends.
    private let idleTimeout: TimeAmount?
    private let port: Port
    private let usage: UsageRecorder?
    private let refusals: RefusalLog
    /// The client's address when a PROXY header named it; else the channel's peer.
    private let client: SocketAddress?
    private let logger: Logger
    private var timer: Scheduled<Void>?
    private var completed = false

    init(
        peer: VerifiedPeer,
        registry: ConnectionRegistry?,
        timeout: TimeAmount,
        port: Port,
        usage: UsageRecorder?,
        refusals: RefusalLog,
        client: SocketAddress? = nil,
        idleTimeout: TimeAmount? = nil,
        logger: Logger
    ) {
        self.client = client
        self.idleTimeout = idleTimeout
        self.peer = peer
        self.registry = registry
        self.timeout = timeout
        self.port = port
        self.usage = usage
        self.refusals = refusals
        self.logger = logger
    }

    package convenience init(
        peer: VerifiedPeer,
        registry: ConnectionRegistry?,
        timeout: TimeAmount,
        port: Port,
        usage: UsageRecorder?,
        idleTimeout: TimeAmount? = nil,
        logger: Logger
    ) {
        self.init(
            peer: peer,
            registry: registry,
            timeout: timeout,
            port: port,
            usage: usage,
            refusals: RefusalLog(
                listener: port == .gateway ? "gateway" : "feedback",
                metrics: GatewayMetrics(),
                logger: logger
            ),
            idleTimeout: idleTimeout,
            logger: logger
        )
    }

    /// A handshake that fails for want of a common TLS version is counted and logged (rate-limited).
    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !self.completed, RefusalLog.isVersionRefusal(error) {
            self.refusals.versionRefused(peer: self.client ?? context.remoteAddress)
        }
        context.fireErrorCaught(error)
    }

    package func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive {
            self.startTimer(context: context)
        }
    }

    package func channelActive(context: ChannelHandlerContext) {
        self.startTimer(context: context)
        context.fireChannelActive()
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        self.timer?.cancel()
    }

    private func startTimer(context: ChannelHandlerContext) {
        guard self.timer == nil, !self.completed else { return }
        self.timer = context.eventLoop.assumeIsolated().scheduleTask(in: self.timeout) {
            guard !self.completed else { return }
            self.logger.debug("TLS handshake timed out")
            context.close(promise: nil)
        }
    }

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted = tlsEvent else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        self.completed = true
        self.timer?.cancel()
        self.registry?.handshakeCompleted(context.channel)
        context.fireUserInboundEventTriggered(event)
        guard let verified = self.peer.value ?? self.resumedSession(context: context) else {
            context.close(promise: nil)
            return
        }
        self.usage?.connected(
            tenant: verified.tenant.name,
            context: context,
            address: self.client ?? context.remoteAddress,
            certificate: verified.certificate,
            feedback: self.port == .feedback
        )
        // The idle clock starts now: the handshake had its own timeout, and a slow handshake
        // must not eat into the time a provider has to send its first frame.
        if let idle = self.idleTimeout {
            do {
                try context.pipeline.syncOperations.addHandler(
                    IdleStateHandler(readTimeout: idle),
                    position: .after(self)
                )
            } catch {
                self.logger.error("could not start the idle timer; closing", metadata: ["error": "\(error)"])
                context.close(promise: nil)
                return
            }
        }
        context.fireUserInboundEventTriggered(verified)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    /// A handshake that completed without the verifier: a resumed TLS session (the verifier runs
    /// only when a certificate is presented). Its certificate gets the resumed-session checks;
    /// `nil` (refused, logged) closes the connection.
    private func resumedSession(context: ChannelHandlerContext) -> ProviderVerified? {
        let certificate = try? context.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self).peerCertificate
        switch self.peer.verifyResumed(certificate) {
        case .trusted(let verified):
            self.logger.debug("resumed TLS session")
            return verified
        case .refused(let why):
            self.refusals.certificateRefused(why, resumed: true, peer: self.client ?? context.remoteAddress)
            return nil
        }
    }
}

@available(*, unavailable)
extension ProviderHandshakeHandler: Sendable {}

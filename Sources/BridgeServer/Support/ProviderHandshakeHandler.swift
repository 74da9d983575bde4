import BridgeCore
import Logging
import NIOCore
import NIOSSL
import NIOTLS
import Synchronization

/// What the certificate verifier learnt during one connection's TLS handshake: the tenant the
/// certificate resolved to, and the certificate. Written once by the verifier, read once by
/// ``ProviderHandshakeHandler``: the tenant is resolved one time per connection.
package final class VerifiedPeer: Sendable {
    private let verified = Mutex<ProviderVerified?>(nil)

    package init() {}

    package func record(_ peer: ProviderVerified) {
        self.verified.withLock { $0 = peer }
    }

    var value: ProviderVerified? {
        self.verified.withLock { $0 }
    }
}

/// Sent down a legacy connection's pipeline once its TLS handshake completed with a trusted
/// client certificate: the port's own handler starts from here.
package struct ProviderVerified: Sendable {
    package var tenant: Tenant
    package var certificate: NIOSSLCertificate

    package init(tenant: Tenant, certificate: NIOSSLCertificate) {
        self.tenant = tenant
        self.certificate = certificate
    }
}

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
    private let port: Port
    private let usage: UsageRecorder?
    private let logger: Logger
    private var timer: Scheduled<Void>?
    private var completed = false

    package init(peer: VerifiedPeer, registry: ConnectionRegistry?, timeout: TimeAmount, port: Port, usage: UsageRecorder?, logger: Logger) {
        self.peer = peer
        self.registry = registry
        self.timeout = timeout
        self.port = port
        self.usage = usage
        self.logger = logger
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
        guard let verified = self.peer.value else {
            // The verifier accepts a certificate only with its tenant: a handshake without one
            // (a resumed session, which the listeners do not offer) is refused all the same.
            self.logger.warning("refusing a \(self.port == .gateway ? "provider" : "feedback") connection: no verified tenant for its client certificate")
            context.close(promise: nil)
            return
        }
        self.usage?.connected(tenant: verified.tenant.name, context: context, certificate: verified.certificate, feedback: self.port == .feedback)
        context.fireUserInboundEventTriggered(verified)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}

@available(*, unavailable)
extension ProviderHandshakeHandler: Sendable {}

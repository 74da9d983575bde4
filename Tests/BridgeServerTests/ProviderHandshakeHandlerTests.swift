import BridgeCore
import BridgeServer
import DevelopmentPKI
import Logging
import NIOCore
import NIOEmbedded
import NIOTLS
import Testing

/// The handshake half both legacy ports share, on an `EmbeddedChannel`: the TLS handshake's
/// completion is the `TLSUserEvent` NIOSSL would send, and the verifier's result is put where
/// the verifier puts it.
@Suite("Provider handshake handler (EmbeddedChannel)")
struct ProviderHandshakeHandlerTests {
    /// What reaches the port's handler.
    final class PortHandler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        private(set) var verified: [ProviderVerified] = []
        /// The idle timer's timeout in the pipeline when the tenant arrived (`nil`: none).
        private(set) var idleTimeoutAtVerified: TimeAmount??

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if let verified = event as? ProviderVerified {
                self.verified.append(verified)
                self.idleTimeoutAtVerified = .some(
                    try? context.pipeline.syncOperations.handler(type: IdleStateHandler.self).readTimeout
                )
            }
            context.fireUserInboundEventTriggered(event)
        }
    }

    struct Setup {
        let channel = EmbeddedChannel()
        let peer = VerifiedPeer()
        let registry = ConnectionRegistry()
        let port = PortHandler()

        init(timeout: TimeAmount = .seconds(10), idleTimeout: TimeAmount? = nil) throws {
            try self.channel.connect(to: SocketAddress(ipAddress: "192.0.2.7", port: 40000)).wait()
            let limits = ConnectionAdmission(
                maximumConnections: 10,
                maximumHandshakes: 10,
                maximumHandshakesPerAddress: 10
            )
            #expect(self.registry.admit(self.channel, limits: limits) == nil)
            let handshake = ProviderHandshakeHandler(
                peer: self.peer,
                registry: self.registry,
                timeout: timeout,
                port: .gateway,
                usage: nil,
                idleTimeout: idleTimeout,
                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
            )
            try self.channel.pipeline.syncOperations.addHandler(handshake)
            try self.channel.pipeline.syncOperations.addHandler(self.port)
        }
    }

    @Test("A handshake that does not complete within the timeout is closed")
    func timeout() throws {
        let setup = try Setup(timeout: .seconds(10))
        #expect(setup.registry.handshakingCount == 1)
        setup.channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(setup.channel.isActive)
        setup.channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!setup.channel.isActive)
        #expect(setup.port.verified.isEmpty)
        #expect(try setup.channel.finish(acceptAlreadyClosed: true).isClean, "nothing left unread in either direction")
    }

    @Test(
        "A completed handshake hands the verifier's tenant to the port's handler once, and the adapter leaves the pipeline"
    )
    func verified() throws {
        let setup = try Setup()
        let pki = try DevelopmentCA()
        let tenant = Tenant(name: "shop", topic: "com.example.shop", environment: .production)
        let certificate = try pki.providerIdentity(bundleID: "com.example.shop").certificate
        setup.peer.record(ProviderVerified(tenant: tenant, certificate: certificate))
        setup.channel.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil))
        #expect(setup.port.verified.map(\.tenant) == [tenant])
        #expect(setup.port.verified.first?.certificate == certificate)
        #expect(setup.registry.handshakingCount == 0, "no longer counted among the handshakes in progress")
        #expect(throws: (any Error).self) {
            try setup.channel.pipeline.syncOperations.handler(type: ProviderHandshakeHandler.self)
        }
        setup.channel.embeddedEventLoop.advanceTime(by: .seconds(60))
        #expect(setup.channel.isActive, "the handshake timer is cancelled")
        #expect(try setup.channel.finish(acceptAlreadyClosed: true).isClean, "nothing left unread in either direction")
    }

    @Test("A handshake without a verified tenant is closed, and the port's handler never starts")
    func unverified() throws {
        let setup = try Setup()
        setup.channel.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil))
        #expect(!setup.channel.isActive)
        #expect(setup.port.verified.isEmpty)
        #expect(try setup.channel.finish(acceptAlreadyClosed: true).isClean, "nothing left unread in either direction")
    }

    @Test("The idle timer starts when the handshake ends, before the port's handler hears of the tenant")
    func idleTimerAtHandshake() throws {
        let setup = try Setup(idleTimeout: .seconds(60))
        #expect(throws: (any Error).self, "no idle timer during the handshake") {
            try setup.channel.pipeline.syncOperations.handler(type: IdleStateHandler.self)
        }
        let pki = try DevelopmentCA()
        let tenant = Tenant(name: "shop", topic: "com.example.shop", environment: .production)
        let certificate = try pki.providerIdentity(bundleID: "com.example.shop").certificate
        setup.peer.record(ProviderVerified(tenant: tenant, certificate: certificate))
        setup.channel.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil))
        #expect(setup.port.idleTimeoutAtVerified == .some(.seconds(60)))
        #expect(try setup.channel.finish(acceptAlreadyClosed: true).isClean, "nothing left unread in either direction")
    }

    @Test("Without an idle timeout (the feedback port), no idle timer is started")
    func noIdleTimer() throws {
        let setup = try Setup()
        let pki = try DevelopmentCA()
        let tenant = Tenant(name: "shop", topic: "com.example.shop", environment: .production)
        let certificate = try pki.providerIdentity(bundleID: "com.example.shop").certificate
        setup.peer.record(ProviderVerified(tenant: tenant, certificate: certificate))
        setup.channel.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: nil))
        #expect(setup.port.idleTimeoutAtVerified == .some(nil))
        #expect(try setup.channel.finish(acceptAlreadyClosed: true).isClean, "nothing left unread in either direction")
    }
}

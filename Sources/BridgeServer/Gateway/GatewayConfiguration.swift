import BridgeCore
import NIOCore
import NIOSSL

/// How the gateway listener (default port 2195) behaves.
public struct GatewayConfiguration: Sendable {
    public var host: String = "0.0.0.0"
    public var port: Int = 2195
    public var tls: LegacyTLSConfiguration
    /// swift-nio-ssl has no handshake timeout of its own: a connection that has not finished its
    /// handshake by then is closed.
    public var handshakeTimeout: TimeAmount = .seconds(10)
    /// A connection that sent nothing for this long after its handshake, with nothing in flight,
    /// is closed.
    public var idleTimeout: TimeAmount? = .minutes(60)
    /// Connections beyond this are closed as soon as they are accepted.
    public var maximumConnections: Int = 10_000
    /// Connections still in their TLS handshake beyond this are closed as soon as they are
    /// accepted, so unauthenticated sockets cannot crowd out providers (docs/operations.md).
    public var maximumHandshakes: Int = 512
    /// The same bound for one source address.
    public var maximumHandshakesPerAddress: Int = 64
    /// The load balancers whose connections begin with a PROXY protocol header naming the
    /// client (docs/scaling.md#proxy-protocol); off by default.
    public var proxyProtocol: ProxyProtocolPolicy = .off
    public var session = ProviderSessionStateMachine.Configuration()
    /// After an error-response: how long to keep reading (and dropping) before the final close,
    /// so that a reset does not destroy the packet on its way (docs/protocol.md#after-a-failure).
    public var errorDrainTime: TimeAmount = .milliseconds(500)
    /// On shutdown: how long in-flight notifications may take before status 10 is sent (docs/protocol.md#shutdown).
    public var shutdownGracePeriod: TimeAmount = .seconds(10)

    public init(tls: LegacyTLSConfiguration) {
        self.tls = tls
    }

    var admission: ConnectionAdmission {
        ConnectionAdmission(
            maximumConnections: self.maximumConnections,
            maximumHandshakes: self.maximumHandshakes,
            maximumHandshakesPerAddress: self.maximumHandshakesPerAddress
        )
    }
}

/// TLS for a legacy listener (docs/protocol.md#tls): the client certificate is always requested and
/// required, and verified against the configured CA certificates or pinned fingerprints. At most TLS 1.2 unless
/// TLS 1.3 is allowed; TLS 1.0 and 1.1 only when legacy TLS is allowed.
public struct LegacyTLSConfiguration: Sendable {
    public var certificateChain: [NIOSSLCertificate]
    public var privateKey: NIOSSLPrivateKey
    /// The CA certificates that client certificates must chain to.
    public var clientCertificateAuthorities: [NIOSSLCertificate]
    /// SHA-256 fingerprints (lowercase hex) of client certificates trusted by themselves,
    /// whoever issued them.
    public var pinnedFingerprints: Set<String> = []
    /// Off by default: under TLS 1.3, post-handshake tickets make some legacy clients miss the
    /// error-response.
    public var allowTLS13 = false
    /// TLS 1.0 and 1.1, for clients that speak nothing newer.
    public var allowLegacyTLS = false
    /// How long the bridge's close waits for the client's close_notify, reading and dropping
    /// meanwhile: after an error-response's drain, and after a feedback poll's last tuple
    /// (docs/protocol.md#closing). A client that only writes sees its writes fail only after the
    /// drain plus this; a client still writing when the close comes may get a reset before it
    /// read its packet. NIOSSL's default, 5 s; 0 closes at once.
    public var closeNotifyWait: TimeAmount = .seconds(5)

    public init(
        certificateChain: [NIOSSLCertificate],
        privateKey: NIOSSLPrivateKey,
        clientCertificateAuthorities: [NIOSSLCertificate]
    ) {
        self.certificateChain = certificateChain
        self.privateKey = privateKey
        self.clientCertificateAuthorities = clientCertificateAuthorities
    }

    public func makeServerContext() throws -> NIOSSLContext {
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: self.certificateChain.map { .certificate($0) },
            privateKey: .privateKey(self.privateKey)
        )
        // `.noHostnameVerification` on a server: request and require a client certificate and
        // verify its chain; clients have no host name to check.
        tls.certificateVerification = .noHostnameVerification
        // The chain is checked by ``LegacyTLSContext`` during the handshake; the CA list is still
        // sent, so that clients with several certificates pick the right one.
        tls.trustRoots = .certificates(self.clientCertificateAuthorities)
        tls.sendCANameList = !self.clientCertificateAuthorities.isEmpty
        tls.minimumTLSVersion = self.allowLegacyTLS ? .tlsv1 : .tlsv12
        tls.maximumTLSVersion = self.allowTLS13 ? .tlsv13 : .tlsv12
        tls.shutdownTimeout = self.closeNotifyWait
        return try NIOSSLContext(configuration: tls)
    }
}

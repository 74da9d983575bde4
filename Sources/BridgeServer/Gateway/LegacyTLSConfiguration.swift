import BridgeCore
import NIOCore
import NIOSSL

/// TLS for a legacy listener (docs/protocol.md#tls): the client certificate is always requested and
/// required, and verified against the configured CA certificates or pinned fingerprints. At most TLS 1.2 unless
/// TLS 1.3 is allowed; TLS 1.0 and 1.1 only when legacy TLS is allowed.
package struct LegacyTLSConfiguration: Sendable {
    package var certificateChain: [NIOSSLCertificate]
    package var privateKey: NIOSSLPrivateKey
    /// The CA certificates that client certificates must chain to.
    package var clientCertificateAuthorities: [NIOSSLCertificate]
    /// SHA-256 fingerprints (lowercase hex) of client certificates trusted by themselves,
    /// whoever issued them.
    package var pinnedFingerprints: Set<String> = []
    /// Off by default: under TLS 1.3, post-handshake tickets make some legacy clients miss the
    /// error-response.
    package var allowTLS13 = false
    /// TLS 1.0 and 1.1, for clients that speak nothing newer.
    package var allowLegacyTLS = false
    /// How long the bridge's close waits for the client's close_notify, reading and dropping
    /// meanwhile: after an error-response's drain, and after a feedback poll's last tuple
    /// (docs/protocol.md#closing). A client that only writes sees its writes fail only after the
    /// drain plus this; a client still writing when the close comes may get a reset before it
    /// read its packet. 5 s; 0 closes at once. A tenant may have its own
    /// (``ClosingOverrides``). The connection's handler times this wait, not NIOSSL (whose
    /// shutdown timeout is one per context, so it could not differ by tenant).
    package var closeNotifyWait: TimeAmount = .seconds(5)

    package init(
        certificateChain: [NIOSSLCertificate],
        privateKey: NIOSSLPrivateKey,
        clientCertificateAuthorities: [NIOSSLCertificate]
    ) {
        self.certificateChain = certificateChain
        self.privateKey = privateKey
        self.clientCertificateAuthorities = clientCertificateAuthorities
    }

    package func makeServerContext() throws -> NIOSSLContext {
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
        // The handlers send close_notify themselves (`close(mode: .output)`) and time the wait
        // for the client's (``closeNotifyWait``); a full close after that, or any other close,
        // is not held up by NIOSSL.
        tls.shutdownTimeout = .zero
        return try NIOSSLContext(configuration: tls)
    }
}

import BridgeCore
import Logging
import NIOCore
import NIOSSL
import NIOTLS
import Synchronization

/// What the certificate verifier learnt during one connection's TLS handshake: the tenant the
/// certificate resolved to, and the certificate. Written once by the verifier, read once by
/// ``ProviderHandshakeHandler``: the tenant is resolved one time per connection. A resumed
/// session's handshake runs no verifier; the handshake handler then asks the verifier of the
/// connection's server context (``verifyResumed(_:)``).
package final class VerifiedPeer: Sendable {
    private struct State {
        var verified: ProviderVerified?
        var verifier: ClientCertificateVerifier?
    }

    private let state = Mutex(State())

    package init() {}

    package func record(_ peer: ProviderVerified) {
        self.state.withLock { $0.verified = peer }
    }

    /// The verifier of the server context this connection's handshake runs in.
    func use(_ verifier: ClientCertificateVerifier) {
        self.state.withLock { $0.verifier = verifier }
    }

    var value: ProviderVerified? {
        self.state.withLock { $0.verified }
    }

    /// The checks of a resumed session (``ClientCertificateVerifier/verifyResumed(_:now:)``) on
    /// the certificate the session carries.
    func verifyResumed(_ certificate: NIOSSLCertificate?) -> ClientCertificateVerifier.Verdict {
        guard let verifier = self.state.withLock({ $0.verifier }) else {
            return .refused("no verifier for this connection")
        }
        let verdict = verifier.verifyResumed(certificate)
        if case .trusted(let verified) = verdict {
            self.record(verified)
        }
        return verdict
    }
}

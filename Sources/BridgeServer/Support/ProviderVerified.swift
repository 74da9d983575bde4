import BridgeCore
import Logging
import NIOCore
import NIOSSL
import NIOTLS
import Synchronization

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

import BridgeCore
import NIOSSL
import SwiftASN1
import X509

/// Resolves the tenant of a provider connection from its verified client certificate
/// (docs/configuration.md#tenants). `nil` refuses the connection.
package protocol TenantResolver: Sendable {
    func tenant(for certificate: NIOSSLCertificate) -> Tenant?

    /// SHA-256 fingerprints (lowercase hex) of certificates the resolver trusts by themselves,
    /// whoever issued them (none by default).
    var pinnedFingerprints: Set<String> { get }
}

extension TenantResolver {
    package var pinnedFingerprints: Set<String> { [] }
}

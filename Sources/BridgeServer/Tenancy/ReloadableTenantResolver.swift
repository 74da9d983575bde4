import BridgeCore
import NIOSSL
import Synchronization

/// The tenants of a running bridge, replaceable by a configuration reload: handshakes and
/// resolutions from then on use the replacement. Connections already open keep the tenant they
/// resolved to (see ``GatewayServer/reviewTenants()`` for those whose certificate no longer
/// resolves).
package final class ReloadableTenantResolver: TenantResolver {
    private let resolver: Mutex<ConfiguredTenantResolver>

    package init(_ resolver: ConfiguredTenantResolver) {
        self.resolver = Mutex(resolver)
    }

    /// The tenants in force now.
    package var current: ConfiguredTenantResolver {
        self.resolver.withLock { $0 }
    }

    /// Uses `resolver` from now on.
    package func replace(with resolver: ConfiguredTenantResolver) {
        self.resolver.withLock { $0 = resolver }
    }

    package func tenant(for certificate: NIOSSLCertificate) -> Tenant? {
        self.current.tenant(for: certificate)
    }

    package var pinnedFingerprints: Set<String> {
        self.current.pinnedFingerprints
    }
}

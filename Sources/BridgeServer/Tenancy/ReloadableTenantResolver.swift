import BridgeCore
import NIOSSL
import Synchronization

/// The tenants of a running bridge, replaceable by a configuration reload: handshakes and
/// resolutions from then on use the replacement. Connections already open keep the tenant they
/// resolved to (see ``GatewayServer/reviewTenants()`` for those whose certificate no longer
/// resolves).
public final class ReloadableTenantResolver: TenantResolver {
    private let resolver: Mutex<ConfiguredTenantResolver>

    public init(_ resolver: ConfiguredTenantResolver) {
        self.resolver = Mutex(resolver)
    }

    /// The tenants in force now.
    public var current: ConfiguredTenantResolver {
        self.resolver.withLock { $0 }
    }

    /// Uses `resolver` from now on.
    public func replace(with resolver: ConfiguredTenantResolver) {
        self.resolver.withLock { $0 = resolver }
    }

    public func tenant(for certificate: NIOSSLCertificate) -> Tenant? {
        self.current.tenant(for: certificate)
    }

    public var pinnedFingerprints: Set<String> {
        self.current.pinnedFingerprints
    }
}

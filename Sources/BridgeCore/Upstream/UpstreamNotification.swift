import LegacyProtocol
import NIOCore

/// One notification on its way upstream: the decoded frame and the tenant it belongs to.
public struct UpstreamNotification: Hashable, Sendable {
    public var tenant: Tenant
    public var frame: NotificationFrame

    public init(tenant: Tenant, frame: NotificationFrame) {
        self.tenant = tenant
        self.frame = frame
    }
}

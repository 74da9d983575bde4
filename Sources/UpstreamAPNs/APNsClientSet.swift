import BridgeCore
import LegacyProtocol
import NIOCore

/// One ``APNsClient`` per upstream credential (a team's signing key, or a certificate), chosen
/// by each notification's ``Tenant/credentials``: tenants of different teams push with their
/// own credentials over their own connections.
public final class APNsClientSet: NotificationUpstream {
    public let clients: [String: APNsClient]
    public let defaultCredentials: String

    /// - Parameter defaultCredentials: the name used for tenants that name none; it must be a
    ///   key of `clients`.
    public init(clients: [String: APNsClient], defaultCredentials: String) {
        precondition(clients[defaultCredentials] != nil, "the default credentials must be one of the clients")
        self.clients = clients
        self.defaultCredentials = defaultCredentials
    }

    public func client(for tenant: Tenant) -> APNsClient? {
        self.clients[tenant.credentials ?? self.defaultCredentials]
    }

    public func send(_ notification: UpstreamNotification, on eventLoop: any EventLoop) -> EventLoopFuture<NotificationOutcome> {
        guard let client = self.client(for: notification.tenant) else {
            // The configuration check refuses unknown names before start-up; this is a guard.
            UpstreamMetrics.shared.finished(.rejected(.processingError), reason: nil)
            return eventLoop.makeSucceededFuture(.rejected(.processingError))
        }
        return client.send(notification, on: eventLoop)
    }

    public func shutdown() {
        for client in self.clients.values {
            client.shutdown()
        }
    }
}

import LegacyProtocol
import NIOCore

/// One notification on its way upstream: the decoded frame, the tenant it belongs to, and where
/// it goes. Where it goes is decided once, here, as the frame enters (a channel token of the
/// tenant's makes it a broadcast, docs/broadcast.md): the payload limit, the upstream request
/// and the migration view's counting all read ``destination``.
public struct UpstreamNotification: Hashable, Sendable {
    /// A device (`POST /3/device/<token>`), or one of the tenant's Live Activity channels
    /// (Apple's broadcast push API).
    public enum Destination: Hashable, Sendable {
        case device
        case broadcast(BroadcastChannel)
    }

    public var tenant: Tenant
    public var frame: NotificationFrame
    public var destination: Destination

    /// Classifies the frame's token against the tenant's channels.
    public init(tenant: Tenant, frame: NotificationFrame) {
        self.tenant = tenant
        self.frame = frame
        self.destination = tenant.channels.channel(forToken: frame.deviceToken).map { .broadcast($0) } ?? .device
    }

    /// Whether it goes to a Live Activity channel.
    public var isBroadcast: Bool {
        if case .broadcast = self.destination { return true }
        return false
    }

    /// The payload limit of this notification: 5120 bytes for a broadcast, else the tenant's
    /// (5120 for VoIP topics, 4096 otherwise).
    public var maximumPayloadLength: Int {
        self.isBroadcast ? BroadcastChannel.maximumPayloadLength : self.tenant.maximumPayloadLength
    }
}

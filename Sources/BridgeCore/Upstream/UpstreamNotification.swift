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

    /// The fields, in one immutable box every copy shares. A notification is held by the
    /// session's action, the gateway's closure and each upstream layer's: a copy is then one
    /// retain of the box, where a copy of the tenant's strings and the frame's buffers was one
    /// each (docs/performance.md, "Copies of a request and of its answer").
    @usableFromInline
    final class Fields: Sendable {
        @usableFromInline let tenant: Tenant
        @usableFromInline let frame: NotificationFrame
        @usableFromInline let destination: Destination

        @usableFromInline
        init(tenant: Tenant, frame: NotificationFrame, destination: Destination) {
            self.tenant = tenant
            self.frame = frame
            self.destination = destination
        }
    }

    @usableFromInline
    let fields: Fields

    // Inlinable, so that reading one field of the tenant or the frame in another module borrows
    // it from the box rather than copying the whole tenant out first.
    @inlinable public var tenant: Tenant { self.fields.tenant }
    @inlinable public var frame: NotificationFrame { self.fields.frame }
    @inlinable public var destination: Destination { self.fields.destination }

    /// Classifies the frame's token against the tenant's channels.
    public init(tenant: Tenant, frame: NotificationFrame) {
        self.fields = Fields(
            tenant: tenant,
            frame: frame,
            destination: tenant.channels.channel(forToken: frame.deviceToken).map { .broadcast($0) } ?? .device
        )
    }

    public static func == (lhs: UpstreamNotification, rhs: UpstreamNotification) -> Bool {
        lhs.fields === rhs.fields
            || (lhs.tenant == rhs.tenant && lhs.frame == rhs.frame && lhs.destination == rhs.destination)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.tenant)
        hasher.combine(self.frame)
        hasher.combine(self.destination)
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

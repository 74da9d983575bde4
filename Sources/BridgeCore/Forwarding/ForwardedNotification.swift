import LegacyProtocol
import NIOCore
import Synchronization

/// One notification on its way to APNs: the decoded frame, the tenant it belongs to, and where
/// it goes. Where it goes is decided once, here, as the frame enters (a channel token of the
/// tenant's makes it a broadcast, docs/broadcast.md): the payload limit, the upstream request
/// and the migration view's counting all read ``destination``. Its ``id`` is made here too: the
/// upstream sends it as the `apns-id` and `apns-collapse-id` of every attempt, and a resend record
/// keeps it for a resend forwarded again (docs/upstream.md#collapse-id).
public struct ForwardedNotification: Hashable, Sendable {
    /// A device (`POST /3/device/<token>`), or one of the tenant's Live Activity channels
    /// (Apple's broadcast push API).
    public enum Destination: Hashable, Sendable {
        case device
        case broadcast(BroadcastChannel)
    }

    /// The fields, in one immutable box every copy shares. A notification is held by the
    /// session's action, the gateway's closure and each forwarding layer's: a copy is then one
    /// retain of the box, where a copy of the tenant's strings and the frame's buffers was one
    /// each (docs/performance-log.md, "Copies of a request and of its answer").
    @usableFromInline
    final class Fields: Sendable {
        @usableFromInline let tenant: Tenant
        @usableFromInline let frame: NotificationFrame
        @usableFromInline let destination: Destination
        @usableFromInline let id: ID

        @usableFromInline
        init(tenant: Tenant, frame: NotificationFrame, destination: Destination, id: ID) {
            self.tenant = tenant
            self.frame = frame
            self.destination = destination
            self.id = id
        }
    }

    @usableFromInline
    let fields: Fields

    // Inlinable, so that reading one field of the tenant or the frame in another module borrows
    // it from the box rather than copying the whole tenant out first (measured:
    // docs/performance-log.md, "Plain seams again").
    @inlinable public var tenant: Tenant { self.fields.tenant }
    @inlinable public var frame: NotificationFrame { self.fields.frame }
    @inlinable public var destination: Destination { self.fields.destination }
    public var id: ID { self.fields.id }

    /// Classifies the frame's token against the tenant's channels, and gives the notification
    /// the process's next id.
    public init(tenant: Tenant, frame: NotificationFrame) {
        self.fields = Fields(
            tenant: tenant,
            frame: frame,
            destination: tenant.channels.channel(forToken: frame.deviceToken).map { .broadcast($0) } ?? .device,
            id: .next()
        )
    }

    /// The same notification under the id an earlier attempt of it was sent with: a resend the
    /// resend records forward again (docs/protocol.md#resend-records) coalesces with that attempt.
    public func resent(as id: ID) -> ForwardedNotification {
        ForwardedNotification(
            fields: Fields(tenant: self.tenant, frame: self.frame, destination: self.destination, id: id)
        )
    }

    private init(fields: Fields) {
        self.fields = fields
    }

    /// Equal when they send the same thing (tenant, frame, destination): the id names an
    /// attempt upstream, and a resend under an earlier attempt's id is the same notification.
    public static func == (lhs: ForwardedNotification, rhs: ForwardedNotification) -> Bool {
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

extension ForwardedNotification {
    /// A notification's id upstream, unique across processes and instances: a UUID (version 4
    /// layout) whose upper 64 bits are random once per process and whose lower 62 bits count.
    /// An id only has to be unique, not secret: `/dev/urandom` once per process, not once per
    /// notification.
    ///
    /// ```
    ///  random prefix (60 bits + version 4)   |  variant 10  |  counter (62 bits)
    /// xxxxxxxx-xxxx-4xxx-                     [89ab]xxx-xxxxxxxxxxxx
    /// ```
    public struct ID: Hashable, Sendable {
        public let high: UInt64
        public let low: UInt64

        /// An id as kept (a resend record's); the caller keeps the UUID layout.
        public init(high: UInt64, low: UInt64) {
            self.high = high
            self.low = low
        }

        /// This process's next id.
        public static func next() -> ID {
            let count = Self.counter.wrappingAdd(1, ordering: .relaxed).newValue
            return ID(high: Self.prefix, low: (count & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000)
        }

        /// Version 4 in bits 12–15 of the third group.
        private static let prefix: UInt64 = {
            var generator = SystemRandomNumberGenerator()
            return (generator.next() & ~0x0000_0000_0000_F000) | 0x0000_0000_0000_4000
        }()
        private static let counter = Atomic<UInt64>(0)
    }
}

import NIOCore

/// A Live Activity channel that a tenant's legacy provider reaches through a **channel token**:
/// a device-token-shaped value (32 bytes) that the operator stores in the provider's device
/// table like any other token. A frame to it becomes a broadcast (Apple's broadcast push API).
public struct BroadcastChannel: Hashable, Sendable, CustomStringConvertible {
    /// The channel's name in the configuration (`tenant.NAME.channel.CHANNEL`).
    public var name: String
    /// The channel id as APNs issued it (base64), sent as `apns-channel-id`.
    public var id: String
    /// The 32-byte channel token.
    public var token: ByteBuffer
    /// `false` for a channel created with the "no message stored" policy: APNs accepts only
    /// `apns-expiration: 0` for it, so the bridge sends 0 whatever the frame says. `nil`: not
    /// configured; the frame's expiry is sent as it is.
    public var storesMessages: Bool?

    public init(name: String, id: String, token: ByteBuffer, storesMessages: Bool? = nil) {
        self.name = name
        self.id = id
        self.token = token
        self.storesMessages = storesMessages
    }

    public var description: String { "\(self.name) (\(self.id))" }

    /// The payload limit of a broadcast.
    public static let maximumPayloadLength = 5120
}

/// A tenant's channels, by channel token.
public struct BroadcastChannels: Hashable, Sendable {
    private var byToken: [ByteBuffer: BroadcastChannel] = [:]

    public init(_ channels: [BroadcastChannel] = []) {
        for channel in channels {
            self.byToken[channel.token] = channel
        }
    }

    public var isEmpty: Bool { self.byToken.isEmpty }
    public var count: Int { self.byToken.count }

    /// Every channel, by name.
    public var all: [BroadcastChannel] {
        self.byToken.values.sorted { $0.name < $1.name }
    }

    /// The channel whose token this is, if any. Costs nothing for a tenant without channels.
    @inline(__always)
    public func channel(forToken token: ByteBuffer) -> BroadcastChannel? {
        if self.byToken.isEmpty { return nil }
        return self.byToken[token]
    }
}

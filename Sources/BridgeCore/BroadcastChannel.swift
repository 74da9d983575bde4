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

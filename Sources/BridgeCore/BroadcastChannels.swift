import NIOCore

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

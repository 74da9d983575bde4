import NIOCore

/// A tenant's own timing of the close after an error-response (docs/protocol.md#closing), each
/// `nil` where the listener's applies.
public struct ClosingOverrides: Hashable, Sendable {
    /// How long what the provider still sends is read and dropped after the packet, before
    /// close_notify goes out (`gateway.errorDrainSeconds`).
    public var errorDrain: TimeAmount?
    /// How long the close then waits for the provider's own close_notify
    /// (`tls.closeNotifyWaitSeconds`).
    public var closeNotifyWait: TimeAmount?

    public init(errorDrain: TimeAmount? = nil, closeNotifyWait: TimeAmount? = nil) {
        self.errorDrain = errorDrain
        self.closeNotifyWait = closeNotifyWait
    }
}

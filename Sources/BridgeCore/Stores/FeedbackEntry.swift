import LegacyProtocol
import NIOCore
import Synchronization

/// A token the upstream reported as no longer registered (410), for the feedback service.
public struct FeedbackEntry: Hashable, Sendable {
    public var tenant: String
    public var environment: APNsEnvironment
    public var deviceToken: ByteBuffer
    /// UNIX seconds: when the upstream decided the token is no longer valid.
    public var timestamp: UInt32

    public init(tenant: String, environment: APNsEnvironment, deviceToken: ByteBuffer, timestamp: UInt32) {
        self.tenant = tenant
        self.environment = environment
        self.deviceToken = deviceToken
        self.timestamp = timestamp
    }

    public var key: FeedbackKey {
        FeedbackKey(tenant: self.tenant, environment: self.environment, deviceToken: self.deviceToken)
    }
}

import LegacyProtocol
import NIOCore
import Synchronization

/// Which feedback list an entry is on, and for which token.
public struct FeedbackKey: Hashable, Sendable {
    public var tenant: String
    public var environment: APNsEnvironment
    public var deviceToken: ByteBuffer

    public init(tenant: String, environment: APNsEnvironment, deviceToken: ByteBuffer) {
        self.tenant = tenant
        self.environment = environment
        self.deviceToken = deviceToken
    }
}

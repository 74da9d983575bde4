import LegacyProtocol
import NIOCore

/// The APNs environment a tenant pushes to.
public enum APNsEnvironment: String, Hashable, Sendable, CaseIterable {
    case production
    case sandbox
}

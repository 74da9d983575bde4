import LegacyProtocol
import NIOCore

/// The SHA-256 of a notification's payload, kept in resend records instead of the payload.
public struct PayloadDigest: Hashable, Sendable {
    public var bytes: (UInt64, UInt64, UInt64, UInt64)

    public init(bytes: (UInt64, UInt64, UInt64, UInt64)) {
        self.bytes = bytes
    }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.bytes == rhs.bytes
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.bytes.0)
        hasher.combine(self.bytes.1)
        hasher.combine(self.bytes.2)
        hasher.combine(self.bytes.3)
    }
}

import LegacyProtocol
import NIOCore

/// Which entries of a ``PushLog`` to read: every filter given must match; newest first, at
/// most ``limit``.
public struct PushLogQuery: Hashable, Sendable {
    /// The most entries one query returns (``limit``).
    public static let maximumLimit = 10_000

    public var tenant: String?
    /// ``PushLog/tokenHash(_:)`` of a whole token.
    public var tokenHash: UInt64?
    /// The token's first bytes (1 to 4), for a token known only by its prefix.
    public var tokenPrefix: [UInt8]?
    public var identifier: NotificationIdentifier?
    public var apnsID: ForwardedNotification.ID?
    /// The HTTP status of the final answer (0: none came).
    public var status: UInt16?
    /// Only what APNs did not accept.
    public var failuresOnly = false
    /// Received at or after, in milliseconds since 1970.
    public var since: UInt64?
    public var limit = 100
    /// ``since`` on the monotonic clock the entries keep (``PushLog`` sets it as it reads).
    var forwardedSince: NIODeadline?

    public init() {}

    /// Whether `entry` passes every filter.
    public func matches(_ entry: PushLogEntry) -> Bool {
        if let tenant, entry.tenant != tenant { return false }
        if let tokenHash, entry.token.hash != tokenHash { return false }
        if let tokenPrefix {
            let count = tokenPrefix.count
            guard count <= Int(entry.token.length) else { return false }
            for (index, byte) in tokenPrefix.prefix(4).enumerated()
            where UInt8(truncatingIfNeeded: entry.token.prefix >> (24 - 8 * index)) != byte {
                return false
            }
        }
        if let identifier, entry.identifier != identifier { return false }
        if let apnsID, entry.apnsID != apnsID { return false }
        if let status, entry.status != status { return false }
        if self.failuresOnly, entry.isAccepted { return false }
        if let forwardedSince, entry.forwardedAt < forwardedSince { return false }
        return true
    }
}

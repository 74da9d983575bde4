import LegacyProtocol

/// What became of one notification upstream, in the legacy provider's terms (CONTRACT §1.7).
///
/// The upstream seam reports this after its own retries: a `rejected` outcome is final.
public enum NotificationOutcome: Hashable, Sendable, CustomStringConvertible {
    /// Delivered to APNs (HTTP 200): nothing is sent to the provider.
    case accepted
    /// APNs answered 410 (`Unregistered`, `ExpiredToken`): accepted silently, as Apple's gateway
    /// did, and the token goes to the tenant's feedback list with this timestamp (UNIX seconds).
    case unregistered(timestamp: UInt32)
    /// The provider gets an error-response with this status and the connection closes.
    case rejected(ErrorResponseStatus)
    /// Given up without telling the provider (429 after the retry budget): logged and counted.
    case dropped

    public var isRejected: Bool {
        if case .rejected = self { return true }
        return false
    }

    public var description: String {
        switch self {
        case .accepted: "accepted"
        case .unregistered(let timestamp): "unregistered(at: \(timestamp))"
        case .rejected(let status): "rejected(\(status))"
        case .dropped: "dropped"
        }
    }
}

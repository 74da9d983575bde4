import LegacyProtocol
import NIOCore
import Synchronization

/// What an upstream outcome changes on a feedback list (docs/feedback.md#on-the-list).
public enum FeedbackChange: Hashable, Sendable {
    /// `410 Unregistered` / `ExpiredToken`: one entry per (tenant, environment, token), keeping
    /// the latest timestamp.
    case unregistered(FeedbackEntry)
    /// A later 200 for the token: the device registered again, so its entry (if any) goes.
    case registered(FeedbackKey)

    public var key: FeedbackKey {
        switch self {
        case .unregistered(let entry): entry.key
        case .registered(let key): key
        }
    }
}

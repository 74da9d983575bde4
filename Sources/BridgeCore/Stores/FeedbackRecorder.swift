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

/// Where the gateway puts feedback changes. The durable stores implement this.
public protocol FeedbackRecorder: Sendable {
    /// Applies a change. The future completes once the change is stored (durably, for the
    /// durable stores); the gateway does not wait for it.
    func apply(_ change: FeedbackChange, on eventLoop: any EventLoop) -> EventLoopFuture<Void>

    /// Whether `key`'s token may be on its feedback list. `false` means certainly not: a 200
    /// for it changes nothing, and the gateway does not call ``apply(_:on:)`` for it
    /// (docs/feedback.md#on-the-list). The durable stores answer from their ``FeedbackListFilter``.
    func mayBeOnList(_ key: FeedbackKey) -> Bool
}

extension FeedbackRecorder {
    /// Without a filter every token may be on its list.
    public func mayBeOnList(_ key: FeedbackKey) -> Bool { true }
}

/// Feedback entries in memory, one per (tenant, environment, token), keeping the latest.
/// For tests of the gateway alone; the feedback service reads a ``FeedbackStore``.
public final class InMemoryFeedbackRecorder: FeedbackRecorder {
    private let entries = Mutex([FeedbackKey: FeedbackEntry]())

    public init() {}

    public func apply(_ change: FeedbackChange, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        var key = change.key
        key.deviceToken = ByteBuffer(buffer: key.deviceToken)  // do not pin the read buffer
        self.entries.withLock { entries in
            switch change {
            case .unregistered(var entry):
                if let existing = entries[key], existing.timestamp > entry.timestamp { return }
                entry.deviceToken = key.deviceToken
                entries[key] = entry
            case .registered:
                entries[key] = nil
            }
        }
        return eventLoop.makeSucceededVoidFuture()
    }

    /// The entries recorded so far, in no particular order.
    public var allEntries: [FeedbackEntry] {
        self.entries.withLock { Array($0.values) }
    }
}

import LegacyProtocol
import NIOCore
import Synchronization

/// A token the upstream reported as no longer registered (410), for the feedback service.
public struct FeedbackEntry: Hashable, Sendable {
    public var tenant: String
    public var environment: APNsEnvironment
    public var deviceToken: ByteBuffer
    /// UNIX seconds.
    public var timestamp: UInt32

    public init(tenant: String, environment: APNsEnvironment, deviceToken: ByteBuffer, timestamp: UInt32) {
        self.tenant = tenant
        self.environment = environment
        self.deviceToken = deviceToken
        self.timestamp = timestamp
    }
}

/// Where the gateway puts feedback entries. The durable feedback store implements this.
public protocol FeedbackRecorder: Sendable {
    func record(_ entry: FeedbackEntry, on eventLoop: any EventLoop) -> EventLoopFuture<Void>
}

/// Feedback entries in memory, one per (tenant, environment, token), keeping the latest.
public final class InMemoryFeedbackRecorder: FeedbackRecorder {
    private struct Key: Hashable {
        var tenant: String
        var environment: APNsEnvironment
        var deviceToken: ByteBuffer
    }

    private let entries = Mutex([Key: FeedbackEntry]())

    public init() {}

    public func record(_ entry: FeedbackEntry, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        var entry = entry
        entry.deviceToken = ByteBuffer(buffer: entry.deviceToken)
        let key = Key(tenant: entry.tenant, environment: entry.environment, deviceToken: entry.deviceToken)
        self.entries.withLock { entries in
            if let existing = entries[key], existing.timestamp > entry.timestamp { return }
            entries[key] = entry
        }
        return eventLoop.makeSucceededVoidFuture()
    }

    /// The entries recorded so far, in no particular order.
    public var allEntries: [FeedbackEntry] {
        self.entries.withLock { Array($0.values) }
    }
}

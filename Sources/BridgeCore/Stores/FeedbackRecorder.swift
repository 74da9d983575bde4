import LegacyProtocol
import NIOCore
import Synchronization

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

import BridgeCore
import Foundation
import Logging
import NIOCore

/// Settings shared by the stores.
public struct BridgeStoreConfiguration: Sendable {
    /// Feedback entries not polled within this time are removed (docs/feedback.md: retention is
    /// bounded). Default 30 days: cron jobs poll daily.
    public var feedbackRetention: Duration = .seconds(30 * 24 * 3600)
    /// How long a resend record is kept (docs/protocol.md#resend-records: 2 minutes by default).
    public var resendRecordWindow: Duration = .seconds(120)
    /// A claim older than this is taken to belong to a drain that died with its process, and its
    /// entries are served again. Longer than the longest drain (a million entries take seconds).
    public var claimLease: Duration = .seconds(30 * 60)
    /// Feedback changes waiting for a commit beyond this are refused (and logged by the
    /// gateway): a store that is down must not grow memory without bound.
    public var maximumQueuedFeedbackChanges: Int = 100_000
    /// How often a claim of a pending resend record checks for its outcome.
    public var resendOutcomePollInterval: Duration = .milliseconds(20)
    /// PostgreSQL only: how often an instance renews its heartbeat, and how long after the last
    /// renewal the other instances take it for gone (crashed), so that the resends of what it
    /// had in flight are forwarded again instead of waiting (docs/protocol.md#resend-records). An instance that
    /// stops cleanly says so at once.
    public var instanceHeartbeatInterval: Duration = .seconds(5)
    public var instanceLease: Duration = .seconds(20)
    /// Usage (per tenant and day: the migration view) older than this is removed. Default 400
    /// days: a year, compared with the same weeks of the year before.
    public var usageRetention: Duration = .seconds(400 * 24 * 3600)
    /// SQLite only: `FULL` (the default) fsyncs every commit, so a commit survives a power cut;
    /// `NORMAL` survives a crash or `kill -9` of the process as soon as the commit returns, and
    /// commits several times faster, so a 410 is durable sooner (docs/feedback.md measures it).
    public var sqliteSynchronous: SQLiteBridgeStore.Synchronous = .full
    /// The wall clock (records and entries outlive the process, so not a monotonic clock).
    public var now: @Sendable () -> Date = { Date() }

    public init() {}
}

import BridgeCore
import Foundation
import Logging
import NIOCore

/// Settings shared by the stores.
package struct BridgeStoreConfiguration: Sendable {
    /// Feedback entries not polled within this time are removed (docs/feedback.md: retention is
    /// bounded). Default 30 days: cron jobs poll daily.
    package var feedbackRetention: Duration = .seconds(30 * 24 * 3600)
    /// How long a resend record is kept (docs/protocol.md#resend-records: 2 minutes by default).
    package var resendRecordWindow: Duration = .seconds(120)
    /// A claim older than this is taken to belong to a drain that died with its process, and its
    /// entries are served again. Longer than the longest drain (a million entries take seconds).
    package var claimLease: Duration = .seconds(30 * 60)
    /// Feedback changes waiting for a commit beyond this are refused (and logged by the
    /// gateway): a store that is down must not grow memory without bound.
    package var maximumQueuedFeedbackChanges: Int = 100_000
    /// The longest a claim of a pending resend record goes without checking the store for its
    /// outcome: 20 ms after it starts waiting, then twice as long each time, at most this. An
    /// outcome this process writes wakes it at once; one another instance writes is seen at the
    /// next check.
    package var resendOutcomeCheckInterval: Duration = .milliseconds(500)
    /// How long what holds a provider waits for a store that does not answer (a PostgreSQL
    /// restart): the lookup of a resend, a farewell's resend records before its packet, a
    /// feedback poll's next batch. Beyond it the lookup fails with status 1, the packet goes
    /// out without its records, the poll is closed (docs/operations.md#store-outage). Writes
    /// that hold nobody (feedback changes, resend outcomes) are retried until the store
    /// answers or closes.
    package var outageBudget: Duration = .seconds(10)
    /// PostgreSQL only: a statement of a write or a lookup that has not answered by then is
    /// taken as lost: its connection is closed and it is tried again (a statement on a
    /// connection to a server that was killed was seen to wait for ever).
    package var statementTimeout: Duration = .seconds(30)
    /// PostgreSQL only: how often an instance renews its heartbeat, and how long after the last
    /// renewal the other instances take it for gone (crashed), so that the resends of what it
    /// had in flight are forwarded again instead of waiting (docs/protocol.md#resend-records). An instance that
    /// stops cleanly says so at once. A renewal unanswered within the interval counts as a
    /// failed statement (``StoreHealth``): the interval bounds how late an outage shows.
    package var instanceHeartbeatInterval: Duration = .seconds(2)
    package var instanceLease: Duration = .seconds(20)
    /// Usage (per tenant and day: the migration view) and the push log's failures older than
    /// this are removed. Default 400 days: a year, compared with the same weeks of the year
    /// before.
    package var usageRetention: Duration = .seconds(400 * 24 * 3600)
    /// SQLite only: `FULL` (the default) fsyncs every commit, so a commit survives a power cut;
    /// `NORMAL` survives a crash or `kill -9` of the process as soon as the commit returns, and
    /// commits several times faster, so a 410 is durable sooner (docs/feedback.md measures it).
    package var sqliteSynchronous: SQLiteBridgeStore.Synchronous = .full
    /// The wall clock (records and entries outlive the process, so not a monotonic clock).
    package var now: @Sendable () -> Date = { Date() }

    package init() {}
}

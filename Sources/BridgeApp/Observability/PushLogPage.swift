import BridgeCore

/// The admin port's answer to `GET /push-log`: the entries found, newest first, and how much
/// the instance's log holds.
package struct PushLogPage: Codable, Hashable, Sendable {
    /// Entries the log keeps at most (`pushLog.entries`).
    package var capacity: Int
    /// Entries it holds now.
    package var held: Int
    /// Entries recorded since the instance started: more than `held` once the oldest go.
    package var recorded: UInt64
    package var entries: [PushLogRecord]

    package init(capacity: Int, held: Int, recorded: UInt64, entries: [PushLogRecord]) {
        self.capacity = capacity
        self.held = held
        self.recorded = recorded
        self.entries = entries
    }

    /// What `log` finds for `query`.
    package init(_ log: PushLog, query: PushLogQuery) {
        let counts = log.counts
        self.init(
            capacity: log.capacity,
            held: counts.held,
            recorded: counts.recorded,
            entries: log.entries(matching: query).map { PushLogRecord($0) }
        )
    }
}

import NIOCore

/// A notification APNs did not accept, as the store keeps it for `usage.retentionDays`
/// (docs/operations.md#did-it-go): its push log entry, the wall-clock time it was forwarded,
/// and the log that recorded it.
public struct StoredPushFailure: Hashable, Sendable {
    /// The push log that recorded it (``PushLog/run``): with the entry's
    /// ``PushLogEntry/sequence``, it names the failure, so one written twice is kept once.
    public var run: UInt64
    /// When the notification was forwarded, in milliseconds since 1970.
    public var receivedMilliseconds: UInt64
    /// The entry, whose ``PushLogEntry/forwardedAt`` is not kept (it is zero here): a time on
    /// the recording process's monotonic clock means nothing outside it.
    public var entry: PushLogEntry

    public init(_ entry: PushLogEntry, run: UInt64, receivedMilliseconds: UInt64) {
        self.run = run
        self.receivedMilliseconds = receivedMilliseconds
        self.entry = entry
        self.entry.forwardedAt = .uptimeNanoseconds(0)
    }
}

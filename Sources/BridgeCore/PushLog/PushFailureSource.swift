/// Where the push log's failures last: the store of a running bridge, or a reader of a stopped
/// (or running) bridge's store for `apns-bridge log --store` (docs/operations.md#did-it-go).
public protocol PushFailureSource: Sendable {
    /// The failures passing every filter of `query` (``PushLogQuery/failuresOnly`` goes without
    /// saying), newest first, at most ``PushLogQuery/limit``.
    func pushFailures(matching query: PushLogQuery) async throws -> [StoredPushFailure]
}

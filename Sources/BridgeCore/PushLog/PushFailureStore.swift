/// The store's side of the push log: the failures each instance's writer copies there, kept for
/// `usage.retentionDays` (a 200 is never written).
public protocol PushFailureStore: PushFailureSource {
    /// Keeps `failures` in one write; one already kept (the same run and sequence) stays once.
    func recordPushFailures(_ failures: [StoredPushFailure]) async throws
}

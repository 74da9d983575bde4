import LegacyProtocol

/// The feedback lists (docs/feedback.md): written by the gateway through ``FeedbackRecorder``,
/// read by the feedback listener through
/// ``drain(tenant:environment:options:pollerConnected:deliver:finish:)``.
public protocol FeedbackStore: FeedbackRecorder {
    /// Serves one poller: the pending entries of this tenant and environment, in batches.
    ///
    /// - `pollerConnected` is asked before each claim, once the store holds the connection the
    ///   claim's statement runs on: a drain whose poller went away while the claim waited (for a
    ///   store that was down) claims nothing and ends.
    /// - `deliver` writes a batch and returns once its bytes were written and flushed; it
    ///   throws when the poller is gone.
    /// - `finish` is called after the last batch (at once when the list is empty) and closes
    ///   the connection.
    ///
    /// Entries are claimed batch by batch, so concurrent drains (in this process or in other
    /// instances on the same database) never serve the same entry. A batch is deleted once
    /// `deliver` returned for it (its bytes were written and flushed: one statement, so the
    /// deletes keep pace with the stream); when the drain stops, what is claimed and not
    /// delivered is released. A crash leaves a claimed batch pending, to be served again.
    func drain(
        tenant: String,
        environment: APNsEnvironment,
        options: FeedbackDrainOptions,
        pollerConnected: () -> Bool,
        deliver: ([FeedbackTuple]) async throws -> Void,
        finish: () async -> Void
    ) async throws -> FeedbackDrainResult

    /// Pending entries (not claimed by a drain in progress) of one list, at most `limit`, in the
    /// order they would be served. For tests and operators' checks; it does not claim anything.
    func pendingEntries(tenant: String, environment: APNsEnvironment, limit: Int) async throws -> [FeedbackEntry]

    /// Pending entries in all lists, claimed or not.
    func pendingCount() async throws -> Int
}

import Foundation

/// Where usage lasts: the bridge's store (``UsageRecorder`` batches are written there), read by
/// `apns-bridge report` and the status page.
public protocol UsageStore: UsageSource {
    /// Adds a batch: counts add to what is there (several instances add up), times keep the
    /// earliest first and the latest last sighting.
    func recordUsage(_ batch: UsageBatch) async throws
}

import BridgeCore
import Foundation
import Logging
import NIOCore

/// The store's retention sweep: ``BridgeStore/removeExpired()``, which `serve` runs every
/// ``interval`` as one of its periodic jobs.
package enum BridgeStoreMaintenance {
    /// How often `serve` sweeps.
    package static let interval: Duration = .seconds(600)

    /// One ``BridgeStore/removeExpired()``, logged when it removed anything or failed.
    package static func sweepOnce(_ store: any BridgeStore, logger: Logger) async {
        do {
            let sweep = try await store.removeExpired()
            if sweep != StoreSweep(feedbackEntries: 0, resendRecords: 0, releasedClaims: 0) {
                logger.info(
                    "store maintenance",
                    metadata: [
                        "feedback_entries_expired": "\(sweep.feedbackEntries)",
                        "resend_records_removed": "\(sweep.resendRecords)",
                        "stale_claims_released": "\(sweep.releasedClaims)",
                        "usage_rows_expired": "\(sweep.usageRows)",
                        "push_failures_expired": "\(sweep.pushFailures)",
                    ]
                )
            }
        } catch {
            logger.error("store maintenance failed", metadata: ["error": "\(error)"])
        }
    }
}

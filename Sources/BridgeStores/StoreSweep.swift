import BridgeCore
import Foundation
import Logging
import NIOCore

/// What ``BridgeStore/removeExpired()`` removed.
package struct StoreSweep: Hashable, Sendable {
    package var feedbackEntries: Int
    package var resendRecords: Int
    package var releasedClaims: Int
    /// Usage rows (per tenant and day) older than the usage retention.
    package var usageRows: Int
    /// The push log's failures older than the usage retention.
    package var pushFailures: Int

    package init(
        feedbackEntries: Int,
        resendRecords: Int,
        releasedClaims: Int,
        usageRows: Int = 0,
        pushFailures: Int = 0
    ) {
        self.feedbackEntries = feedbackEntries
        self.resendRecords = resendRecords
        self.releasedClaims = releasedClaims
        self.usageRows = usageRows
        self.pushFailures = pushFailures
    }
}

import BridgeCore
import Foundation
import Logging
import NIOCore

/// What ``BridgeStore/removeExpired()`` removed.
public struct StoreSweep: Hashable, Sendable {
    public var feedbackEntries: Int
    public var resendRecords: Int
    public var releasedClaims: Int
    /// Usage rows (per tenant and day) older than the usage retention.
    public var usageRows: Int

    public init(feedbackEntries: Int, resendRecords: Int, releasedClaims: Int, usageRows: Int = 0) {
        self.feedbackEntries = feedbackEntries
        self.resendRecords = resendRecords
        self.releasedClaims = releasedClaims
        self.usageRows = usageRows
    }
}

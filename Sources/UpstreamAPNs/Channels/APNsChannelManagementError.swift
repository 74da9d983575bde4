import CoreMetrics
import Foundation
import Logging
import NIOCore
import NIOPosix

/// A channel management request APNs refused, or that got no answer.
public struct APNsChannelManagementError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The HTTP status; `nil` when APNs did not answer.
    public var status: Int?
    public var reason: APNsReason?
    public var requestID: String
    public var detail: String

    public var description: String {
        var text = self.status.map { "APNs answered \($0)" } ?? "no answer from APNs"
        if let reason { text += " \(reason)" }
        if !self.detail.isEmpty { text += ": \(self.detail)" }
        return text + " (apns-request-id \(self.requestID))"
    }
}

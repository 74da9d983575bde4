import CoreMetrics
import Foundation
import Logging
import NIOCore
import NIOPosix

/// A channel as the channel management API describes it.
public struct APNsChannelInfo: Hashable, Sendable {
    /// Base64, as APNs issued it.
    public var id: String
    public var messageStoragePolicy: APNsMessageStoragePolicy?
    /// `LiveActivity`.
    public var pushType: String?

    public init(id: String, messageStoragePolicy: APNsMessageStoragePolicy?, pushType: String?) {
        self.id = id
        self.messageStoragePolicy = messageStoragePolicy
        self.pushType = pushType
    }
}

import CoreMetrics
import Foundation
import Logging
import NIOCore
import NIOPosix

/// How long APNs keeps a broadcast for devices that were offline (`message-storage-policy`).
public enum APNsMessageStoragePolicy: Int, Hashable, Sendable, Codable, CaseIterable, CustomStringConvertible {
    /// Nothing is stored: a broadcast reaches the devices online now, and must carry
    /// `apns-expiration: 0` (APNs answers `BadExpirationDate` otherwise).
    case noMessageStored = 0
    /// The most recent broadcast is stored for devices that come online later.
    case mostRecentMessageStored = 1

    public var description: String {
        switch self {
        case .noMessageStored: "no-message-stored"
        case .mostRecentMessageStored: "most-recent-message-stored"
        }
    }
}

import BridgeCore
import Foundation
import Logging
import NIOCore

/// Errors of the stores themselves (the database libraries' errors pass through).
package enum StoreError: Error, CustomStringConvertible {
    case schemaTooNew(found: Int, known: Int)
    case invalidURL(String)
    /// A store whose schema predates usage (`apns-bridge report` on it).
    case noUsage(found: Int)
    /// A store whose schema predates the push log's failures (`apns-bridge log --store` on it).
    case noPushFailures(found: Int)
    /// A database server that did not accept a connection (the location, redacted; the cause).
    case unreachable(String, String)

    package var description: String {
        switch self {
        case .unreachable(let location, let cause):
            "cannot connect to \(location): \(cause)"
        case .noUsage(let found):
            "the store has no usage yet (schema version \(found)): a bridge of this version records it once it has opened the store"
        case .noPushFailures(let found):
            "the store keeps no push log failures yet (schema version \(found)): a bridge of this version adds them once it has opened the store"
        case .schemaTooNew(let found, let known):
            "the database's schema version \(found) is newer than this apns-bridge knows (\(known)); upgrade apns-bridge"
        case .invalidURL(let reason):
            "invalid store URL: \(reason)"
        }
    }
}

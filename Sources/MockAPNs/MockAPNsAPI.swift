import NIOCore
import NIOHPACK
import Synchronization

/// The APIs the mock serves.
package enum MockAPNsAPI: String, Hashable, Sendable {
    /// `POST /3/device/<token>`.
    case device
    /// `POST /4/broadcasts/apps/<bundle id>`.
    case broadcast
    /// `/1/apps/<bundle id>/channels` and `/all-channels`.
    case channelManagement
}

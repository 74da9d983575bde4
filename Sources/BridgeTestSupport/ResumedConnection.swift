import DevelopmentPKI
import Foundation
import NIOCore

/// One connection of the habits script's `resume`.
package struct ResumedConnection: Decodable, Sendable {
    package var reused: Bool
    /// What the server sent, hex.
    package var received: String
}

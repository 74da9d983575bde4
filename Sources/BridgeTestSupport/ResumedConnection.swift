import DevelopmentPKI
import Foundation
import NIOCore

/// One connection of the habits script's `resume`.
public struct ResumedConnection: Decodable, Sendable {
    public var reused: Bool
    /// What the server sent, hex.
    public var received: String
}

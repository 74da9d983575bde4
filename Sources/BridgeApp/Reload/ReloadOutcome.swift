import BridgeCore
import BridgeForwarding
import BridgeServer
import CoreMetrics
import Crypto
import Foundation
import Logging
import UpstreamAPNs

/// What a reload did: the changes applied, the keys that change only at restart, or why the new
/// configuration was refused (then nothing changed).
package struct ReloadOutcome: Sendable, CustomStringConvertible {
    /// What changed in the running bridge, one line each.
    package var applied: [String] = []
    /// Keys whose new values differ from those the bridge started with, and that take effect
    /// only at restart.
    package var needsRestart: [String] = []
    /// Set when the new configuration was refused; the running one stays.
    package var refused: ConfigurationError?

    package var description: String {
        if let refused {
            return "refused, the running configuration stays: \(refused)"
        }
        var lines = [
            self.applied.isEmpty ? "reloaded: no changes" : "reloaded: " + self.applied.joined(separator: "; ")
        ]
        if !self.needsRestart.isEmpty {
            lines.append("changed but applied only at restart: " + self.needsRestart.joined(separator: ", "))
        }
        return lines.joined(separator: "\n")
    }
}

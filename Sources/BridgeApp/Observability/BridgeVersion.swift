import BridgeCore
import BridgeForwarding
import BridgeServer
import BridgeStores
import Foundation
import LegacyProtocol
import Prometheus
import Synchronization
import UpstreamAPNs

/// The build of this program, for `--version` and the status page.
package enum BridgeVersion {
    package static let version = "0.5.0"

    /// The HTTP/2 engines this build has: `nio`, or `nio, nghttp2` with the `NGHTTP2Engine`
    /// trait.
    package static var engines: String {
        APNsHTTP2Engine.available.map(\.rawValue).joined(separator: ", ")
    }

    /// The version with how it was built: `0.5.0 (release build, Linux x86_64, HTTP/2 engines nio, nghttp2)`.
    package static var description: String {
        #if DEBUG
        let configuration = "debug"
        #else
        let configuration = "release"
        #endif
        #if os(Linux)
        let system = "Linux"
        #elseif os(macOS)
        let system = "macOS"
        #else
        let system = "unknown system"
        #endif
        #if arch(x86_64)
        let architecture = "x86_64"
        #elseif arch(arm64)
        let architecture = "arm64"
        #else
        let architecture = "unknown architecture"
        #endif
        return "\(Self.version) (\(configuration) build, \(system) \(architecture), HTTP/2 engines \(Self.engines))"
    }
}

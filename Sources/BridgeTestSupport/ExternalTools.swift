import Foundation

/// Where an external tool is, from PATH.
package func executablePath(_ name: String) -> String? {
    let paths = (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":")
    return paths.map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
}

/// Interop tests need tools from Debian packages. `.ci/run` installs them and sets
/// APNS_BRIDGE_REQUIRE_INTEROP=1, so in CI they always run (and fail if a tool is missing);
/// elsewhere they run when the tool is installed.
package let interopRequired = ProcessInfo.processInfo.environment["APNS_BRIDGE_REQUIRE_INTEROP"] == "1"

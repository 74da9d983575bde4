import ArgumentParser
import BridgeApp
import BridgeServer
import Foundation
import Logging
import NIOCore

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract:
            "Runs the bridge: the legacy gateway (2195), the feedback service (2196), the admin port, and the HTTP/2 client.",
        discussion: """
            Settings come from a YAML file (--config), APNS_BRIDGE_* environment variables and \
            flags, flags winning (docs/configuration.md). Provider certificates name their tenant \
            (UID=, or a configured fingerprint); the topic and environment come from the \
            configuration, else from the certificate. SIGHUP (or `apns-bridge reload`) reloads the \
            configuration: tenants, upstream credentials, the listeners' certificates and the log \
            level change without a restart; an invalid new configuration is refused and the running \
            one stays. SIGTERM or SIGINT: the listeners stop, every provider connection gets the \
            status-10 error-response naming its last completed notification, then the process exits. Prints `ready gateway=PORT feedback=PORT \
            admin=PORT` on standard output once listening.
            """
    )

    @OptionGroup var options: BridgeOptions

    func run() async throws {
        let settings = try await self.options.loadSettings()
        let source = try self.options.settingsSource()
        // The level is the handlers' floor; LiveLogLevel decides, and a reload changes it.
        let level = LiveLogLevel(settings.logLevel)
        LoggingSystem.bootstrap { label in
            LiveLevelLogHandler(
                wrapping: BridgeLogHandler(label: label, format: settings.logFormat, logLevel: .trace),
                level: level
            )
        }
        let metrics = BridgeMetrics.bootstrapPrometheus()
        let logger = Logger(label: "apns-bridge")
        do {
            try await BridgeRuntime.serve(settings, source: source, metrics: metrics, logLevel: level, logger: logger) {
                running in
                // One line on standard output, once every listener is up, for scripts and tests
                // that start the bridge on port 0.
                let addresses = running.addresses
                let ports =
                    "gateway=\(addresses.gateway.port ?? 0) feedback=\(addresses.feedback.port ?? 0) admin=\(addresses.admin?.port.map(String.init) ?? "off")"
                FileHandle.standardOutput.write(Data("ready \(ports)\n".utf8))
            }
        } catch let error as ConfigurationError {
            FileHandle.standardError.write(Data("apns-bridge: \(error)\n".utf8))
            throw ExitCode(78)  // EX_CONFIG, as for the settings themselves
        }
    }
}

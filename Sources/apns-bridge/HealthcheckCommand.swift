import ArgumentParser
import BridgeApp
import Foundation
import NIOCore

struct HealthcheckCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "healthcheck",
        abstract:
            "Exits 0 when the running bridge is ready (its admin port answers GET /readyz with 200), 1 otherwise.",
        discussion: """
            For a container's HEALTHCHECK or a supervisor. The admin address is --admin, else \
            $APNS_BRIDGE_ADMIN_LISTEN, else 127.0.0.1:9180 (a listener on 0.0.0.0 is reached on \
            127.0.0.1). Prints the answer on one line.
            """
    )

    @Option(help: "HOST:PORT of the bridge's admin port.")
    var admin: String?

    @Option(help: "Seconds to wait for the answer.")
    var timeout: Double = 5

    func run() async throws {
        let text = self.admin ?? ProcessInfo.processInfo.environment["APNS_BRIDGE_ADMIN_LISTEN"] ?? "127.0.0.1:9180"
        guard let address = SettingsReader.parseAddress(text) else {
            throw ValidationError("--admin \(text): expected HOST:PORT")
        }
        do {
            let status = try await AdminProbe.status(
                host: address.host,
                port: address.port,
                timeout: .milliseconds(Int64(self.timeout * 1000))
            )
            print("GET /readyz on \(text): \(status)")
            if status != 200 { throw ExitCode(1) }
        } catch let error as AdminProbe.NoAnswer {
            print("not healthy: \(error)")
            throw ExitCode(1)
        }
    }
}

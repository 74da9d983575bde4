import ArgumentParser
import BridgeApp
import Foundation
import NIOCore

struct ReloadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reload",
        abstract: "Asks the running bridge to reload its configuration (as SIGHUP does) and prints what changed.",
        discussion: """
            Sends POST /-/reload to the bridge's admin port: --admin, else \
            $APNS_BRIDGE_ADMIN_LISTEN, else 127.0.0.1:9180. The bridge reads its configuration \
            again, checks it completely and applies tenants, upstream credentials, the listeners' \
            certificates and the log level without a restart. Exits 0 when the new configuration \
            is in force; 1 when it was refused (the running one stays; the key at fault is \
            printed) or the bridge did not answer.
            """
    )

    @Option(help: "HOST:PORT of the bridge's admin port.")
    var admin: String?

    @Option(help: "Seconds to wait for the answer.")
    var timeout: Double = 30

    func run() async throws {
        let text = self.admin ?? ProcessInfo.processInfo.environment["APNS_BRIDGE_ADMIN_LISTEN"] ?? "127.0.0.1:9180"
        guard let address = SettingsReader.parseAddress(text) else {
            throw ValidationError("--admin \(text): expected HOST:PORT")
        }
        do {
            let answer = try await AdminProbe.request(
                host: address.host,
                port: address.port,
                method: "POST",
                path: "/-/reload",
                timeout: .milliseconds(Int64(self.timeout * 1000))
            )
            print(answer.body.trimmingCharacters(in: .whitespacesAndNewlines))
            if answer.status != 200 { throw ExitCode(1) }
        } catch let error as AdminProbe.NoAnswer {
            print("no reload: \(error)")
            throw ExitCode(1)
        }
    }
}

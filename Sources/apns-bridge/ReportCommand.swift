import ArgumentParser
import BridgeApp
import BridgeCore
import BridgeServer
import BridgeStores
import Foundation
import Logging

struct ReportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract:
            "Prints the migration report: per tenant, who still uses the legacy interface, how, and what stands in the way of retiring it.",
        discussion: """
            Reads the store (the configuration's store.url, or --store) without changing it: it works \
            against a stopped bridge's store, and beside running ones. One row per tenant, over the \
            last --days days (UTC), the tenants blocking the end of the migration first, each with a \
            line in plain language. With PostgreSQL the figures are the sum over every instance. \
            docs/operations.md, "Ending the migration", explains how to read it.
            """
    )

    @OptionGroup var options: BridgeOptions

    @Option(help: "The days to report, today included.")
    var days: Int = 30

    @Option(help: "Only this tenant.")
    var tenant: String?

    @Option(help: "table, json or csv.")
    var format: String = "table"

    func validate() throws {
        guard (1...3650).contains(self.days) else { throw ValidationError("--days \(self.days): expected 1 to 3650") }
        guard MigrationReportFormat(rawValue: self.format) != nil else {
            throw ValidationError("--format \(self.format): expected table, json or csv")
        }
    }

    func run() async throws {
        var logger = Logger(label: "apns-bridge.report")
        logger.logLevel = .warning
        // The whole configuration names the store and the tenants; with --store alone (no
        // configuration at hand), the store's own tenants are listed.
        var location = self.options.store
        var knownTenants: [String] = []
        do {
            let settings = try await self.options.settingsSource().load()
            location = settings.storeLocation
            knownTenants = settings.tenants.rules.map(\.name)
        } catch let error as ConfigurationError {
            guard location != nil else {
                FileHandle.standardError.write(
                    Data("apns-bridge: \(error)\n(or name the store alone with --store)\n".utf8)
                )
                throw ExitCode(78)
            }
        }
        let now = Date()
        let firstDay = UsageDay(number: UsageDay(now).number - self.days + 1)
        let usage: StoredUsage
        do {
            usage = try await BridgeStoreLocation.withReader(location!, logger: logger) { [tenant] source in
                try await source.usage(from: firstDay, tenant: tenant)
            }
        } catch {
            FileHandle.standardError.write(
                Data(
                    "apns-bridge: cannot read the usage in \(BridgeStoreLocation.redacted(location!)): \(error)\n".utf8
                )
            )
            throw ExitCode(1)
        }
        let tenants = self.tenant.map { [$0] } ?? knownTenants
        var report = MigrationReport(usage: usage, days: self.days, now: now, knownTenants: tenants)
        if let tenant = self.tenant {
            report.rows.removeAll { $0.tenant != tenant }
        }
        print(MigrationReportFormat(rawValue: self.format)!.render(report), terminator: "")
    }
}

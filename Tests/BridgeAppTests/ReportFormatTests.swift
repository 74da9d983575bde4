import BridgeApp
import BridgeCore
import Foundation
import Testing

/// `apns-bridge report --format table` with tenant names from a hostile or careless store.
@Suite("The report's table")
struct ReportFormatTests {
    static func report(tenants: [String]) -> MigrationReport {
        var usage = StoredUsage()
        let now = Date(timeIntervalSince1970: 1_767_225_600)
        for tenant in tenants {
            usage.counts[.init(tenant: tenant, day: UsageDay(now), counter: "command.2")] = 1
            usage.counts[.init(tenant: tenant, day: UsageDay(now), counter: "accepted")] = 1
        }
        return MigrationReport(usage: usage, days: 30, now: now)
    }

    @Test(
        "A newline or an ESC sequence in a tenant name is printed escaped: no forged line, nothing reaches the terminal"
    )
    func controlCharactersEscaped() {
        let forged = "shop\nevil           1  0/0/1  none  0  2026-01-01  ready to retire"
        let text = MigrationReportFormat.table.render(
            Self.report(tenants: [forged, "clear\u{1B}[2J\u{1B}]0;owned\u{07}"])
        )
        #expect(!text.contains("\u{1B}") && !text.contains("\u{07}"))
        #expect(text.contains("shop\\nevil"))
        #expect(!text.split(separator: "\n").contains { $0.hasPrefix("evil") }, "\(text)")
    }

    @Test("Bidirectional controls in a tenant name are printed escaped: nothing renders the line reversed")
    func bidirectionalControlsEscaped() {
        let controls = [
            "\u{202A}", "\u{202B}", "\u{202C}", "\u{202D}", "\u{202E}", "\u{2066}", "\u{2067}", "\u{2068}", "\u{2069}",
        ]
        let text = MigrationReportFormat.table.render(
            Self.report(tenants: controls.map { "shop\($0)lihs" } + ["\u{200F}rtl\u{061C}"])
        )
        for scalar in controls + ["\u{200F}", "\u{061C}"] {
            #expect(
                !text.contains(scalar),
                "U+\(String(scalar.unicodeScalars.first!.value, radix: 16, uppercase: true))"
            )
        }
        #expect(text.contains(#"shop\u{202E}lihs"#), "\(text)")
    }

    @Test("A 100,000-character tenant name is cut: the table stays the size of its rows")
    func longNamesCut() {
        let tenants = ["a" + String(repeating: "x", count: 100_000)] + (1...9).map { "tenant\($0)" }
        let text = MigrationReportFormat.table.render(Self.report(tenants: tenants))
        #expect(text.utf8.count < 10_000, "\(text.utf8.count) bytes")
        #expect(text.split(separator: "\n").allSatisfy { $0.count < 400 })
    }
}

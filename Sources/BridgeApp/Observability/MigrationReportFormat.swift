import BridgeCore
import Foundation

/// `apns-bridge report`'s three formats of a ``MigrationReport``.
package enum MigrationReportFormat: String, CaseIterable, Sendable {
    /// Aligned columns for people, the plain-language line last.
    case table
    /// One JSON object: the report's days and its rows with every figure.
    case json
    /// One line per tenant with every figure, for a spreadsheet.
    case csv

    package func render(_ report: MigrationReport) -> String {
        switch self {
        case .table: Self.table(report)
        case .json: Self.json(report)
        case .csv: Self.csv(report)
        }
    }

    static func date(_ date: Date?) -> String {
        date.map { $0.formatted(Date.ISO8601FormatStyle()) } ?? ""
    }

    static func day(_ date: Date?) -> String {
        date.map { UsageDay($0).description } ?? "never"
    }

    /// `0:12 1:0 2:4031`.
    static func pairs(_ values: [String: Int64]) -> String {
        values.sorted { (Int($0.key) ?? 0, $0.key) < (Int($1.key) ?? 0, $1.key) }.map { "\($0.key):\($0.value)" }
            .joined(separator: " ")
    }

    /// The widest a column other than the last gets: a longer tenant name is cut.
    static let maximumColumnWidth = 40

    /// A table cell as a terminal may show it: control characters escaped (a tenant name from
    /// the store with a newline cannot print a forged line, nor an ESC sequence reach the
    /// terminal), and cut to `width` characters.
    static func cell(_ text: String, width: Int? = maximumColumnWidth) -> String {
        let escaped = LogLineEscaping.escaped(text)
        guard let width, escaped.count > width else { return escaped }
        return String(escaped.prefix(width - 1)) + "…"
    }

    static func table(_ report: MigrationReport) -> String {
        let header = [
            "TENANT", "NOTIFICATIONS", "COMMAND 0/1/2", "FAILED (STATUS:COUNT)", "410s", "LAST SEEN", "FEEDBACK POLLED",
            "WAITING",
            "CERTIFICATE ENDS", "WHAT STANDS IN THE WAY",
        ]
        let rows = report.rows.map { row in
            [
                Self.cell(row.tenant), MigrationReport.grouped(row.notifications),
                ["0", "1", "2"].map { MigrationReport.grouped(row.byCommand[$0] ?? 0) }.joined(separator: "/"),
                row.failedByStatus.isEmpty ? "none" : Self.pairs(row.failedByStatus),
                MigrationReport.grouped(row.unregistered), Self.day(row.lastSeen), Self.day(row.feedbackLastPoll),
                MigrationReport.grouped(Int64(row.feedbackBacklog)),
                row.certificateExpiry.map { UsageDay($0).description } ?? "not seen",
                Self.cell(row.verdict, width: nil),
            ]
        }
        let text =
            "apns-bridge migration report: \(report.days) days, \(report.firstDay) to \(UsageDay(report.generated)) (UTC)\n"
        if report.rows.isEmpty {
            return text + "no tenant seen\n"
        }
        return text + Self.aligned(header, rows)
    }

    /// The header and the rows in columns two spaces apart, each as wide as its widest cell
    /// (the last one left as it is), a line each.
    static func aligned(_ header: [String], _ rows: [[String]]) -> String {
        var widths = header.map(\.count)
        for row in rows {
            for (index, cell) in row.enumerated() where index < row.count - 1 {
                widths[index] = max(widths[index], cell.count)
            }
        }
        func line(_ cells: [String]) -> String {
            cells.enumerated().map { index, cell in
                index == cells.count - 1 ? cell : cell.padding(toLength: widths[index], withPad: " ", startingAt: 0)
            }.joined(separator: "  ")
        }
        return ([header] + rows).map(line).joined(separator: "\n") + "\n"
    }

    static func json(_ report: MigrationReport) -> String {
        struct Document: Encodable {
            var generated: String
            var firstDay: String
            var days: Int
            var tenants: [MigrationReport.Row]
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        let document = Document(
            generated: Self.date(report.generated),
            firstDay: report.firstDay.description,
            days: report.days,
            tenants: report.rows
        )
        let data = (try? encoder.encode(document)) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    static let csvHeader = [
        "tenant", "notifications", "command_0", "command_1", "command_2", "accepted", "broadcast", "unregistered",
        "dropped",
        "failed_by_status", "tls_versions", "source_addresses", "first_seen", "last_seen", "feedback_polls",
        "feedback_tuples_delivered", "feedback_last_poll", "feedback_backlog", "feedback_oldest_entry",
        "certificate_expiry",
        "certificates", "blocking", "verdict",
    ]

    static func csv(_ report: MigrationReport) -> String {
        var text = Self.csvHeader.joined(separator: ",") + "\n"
        for row in report.rows {
            let cells: [String] = [
                row.tenant, "\(row.notifications)", "\(row.byCommand["0"] ?? 0)", "\(row.byCommand["1"] ?? 0)",
                "\(row.byCommand["2"] ?? 0)",
                "\(row.accepted)", "\(row.broadcast)", "\(row.unregistered)", "\(row.dropped)",
                Self.pairs(row.failedByStatus),
                Self.pairs(row.tlsVersions), "\(row.distinctSourceAddresses)", Self.date(row.firstSeen),
                Self.date(row.lastSeen),
                "\(row.feedbackPolls)", "\(row.feedbackTuplesDelivered)", Self.date(row.feedbackLastPoll),
                "\(row.feedbackBacklog)",
                Self.date(row.feedbackOldestEntry), Self.date(row.certificateExpiry),
                row.certificates.map { "\($0.subject) (\($0.fingerprint.prefix(16)), ends \(Self.date($0.notAfter)))" }
                    .joined(separator: "; "),
                "\(row.blocking)", row.verdict,
            ]
            text += cells.map(Self.csvField).joined(separator: ",") + "\n"
        }
        return text
    }

    /// RFC 4180: quoted when it holds a comma, a quote or a line break; quotes doubled. A
    /// field a spreadsheet would run as a formula (`=`, `+`, `-`, `@` first) gets a `'` first.
    static func csvField(_ value: String) -> String {
        var value = value
        if let first = value.first, "=+-@".contains(first), Int(value) == nil {
            value = "'" + value
        }
        guard value.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return value }
        return "\"" + value.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}

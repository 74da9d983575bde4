import Foundation

/// `apns-bridge log`'s three formats of push log entries (docs/operations.md#did-it-go), like
/// `report`'s: a table for people, JSON, CSV for a spreadsheet.
package enum PushLogFormat: String, CaseIterable, Sendable {
    case table
    /// One JSON object: the entries, newest first, each with every field.
    case json
    case csv

    /// `records` newest first; `instances`: the admin addresses read, named in a column when
    /// there are several.
    package func render(_ records: [PushLogRecord], instances: [String]) -> String {
        switch self {
        case .table: Self.table(records, showInstance: instances.count > 1)
        case .json: Self.json(records, instances: instances)
        case .csv: Self.csv(records)
        }
    }

    /// The device token's prefix, or the channel of a broadcast.
    static func destination(_ record: PushLogRecord) -> String {
        record.channel.map { "channel \($0)" } ?? record.token
    }

    /// What APNs answered: the status and reason, or why there was no answer.
    static func answer(_ record: PushLogRecord) -> String {
        if record.resendMatched { return "resend record" }
        var text = record.status.map { "\($0)" } ?? "none"
        if let reason = record.reason { text += " \(reason)" }
        if let failure = record.failure { text += " (\(failure))" }
        return text
    }

    static func table(_ records: [PushLogRecord], showInstance: Bool) -> String {
        guard !records.isEmpty else { return "no notification found\n" }
        var header = [
            "RECEIVED (UTC)", "TENANT", "CMD", "IDENTIFIER", "TOKEN", "APNS-ID", "APNS", "ATTEMPTS", "MS",
            "PROVIDER TOLD",
        ]
        if showInstance { header.insert("INSTANCE", at: 1) }
        let rows = records.map { record in
            var cells = [
                record.received, MigrationReportFormat.cell(record.tenant), "\(record.command)", "\(record.identifier)",
                MigrationReportFormat.cell(Self.destination(record)), record.apnsID,
                MigrationReportFormat.cell(Self.answer(record)), "\(record.attempts)",
                String(format: "%.1f", record.milliseconds), record.told,
            ]
            if showInstance { cells.insert(record.instance ?? "", at: 1) }
            return cells
        }
        return MigrationReportFormat.aligned(header, rows)
    }

    static func json(_ records: [PushLogRecord], instances: [String]) -> String {
        struct Document: Encodable {
            var instances: [String]
            var entries: [PushLogRecord]
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(Document(instances: instances, entries: records))) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    static let csvHeader = [
        "received", "instance", "tenant", "environment", "command", "identifier", "token", "token_hash", "token_bytes",
        "channel", "apns_id", "apns_unique_id", "status", "reason", "failure", "attempts", "milliseconds", "outcome",
        "told", "resend_matched",
    ]

    static func csv(_ records: [PushLogRecord]) -> String {
        var text = Self.csvHeader.joined(separator: ",") + "\n"
        for record in records {
            let cells: [String] = [
                record.received, record.instance ?? "", record.tenant, record.environment, "\(record.command)",
                "\(record.identifier)", record.token, record.tokenHash, "\(record.tokenBytes)", record.channel ?? "",
                record.apnsID, record.apnsUniqueID ?? "", record.status.map { "\($0)" } ?? "", record.reason ?? "",
                record.failure ?? "", "\(record.attempts)", String(format: "%.3f", record.milliseconds), record.outcome,
                record.told, "\(record.resendMatched)",
            ]
            text += cells.map(MigrationReportFormat.csvField).joined(separator: ",") + "\n"
        }
        return text
    }
}

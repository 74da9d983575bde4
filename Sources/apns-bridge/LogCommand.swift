import ArgumentParser
import BridgeApp
import BridgeCore
import BridgeStores
import Foundation
import Logging
import NIOCore

struct LogCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log",
        abstract:
            "Answers \"did it go?\": what APNs said about each legacy notification, from the push log of running bridges or the failures in the store.",
        discussion: """
            Reads GET /push-log on each --admin address (default $APNS_BRIDGE_ADMIN_LISTEN, else \
            127.0.0.1:9180) and prints the entries that pass every filter, newest first: when the \
            notification came, its tenant, command and identifier, the token's first bytes, the apns-id \
            it was sent with, APNs' status and reason, the attempts and the time to the answer, and \
            what the provider was told. A whole --token is hashed here and only its hash is sent. Each \
            instance keeps its own log in memory (pushLog.entries): give every instance's admin \
            address. Exits 1 if an instance could not be read. With --store, reads instead the \
            failures every instance copied to the store (kept for usage.retentionDays; accepted \
            notifications are not stored). docs/operations.md, "Did it go?".
            """
    )

    @Option(name: .customLong("admin"), help: "HOST:PORT of a bridge's admin port; repeat for several instances.")
    var admins: [String] = []

    @Option(
        help:
            "Read the failures kept in this store instead (sqlite:PATH or postgres://…, as store.url), beside running bridges or none."
    )
    var store: String?

    @Option(help: "Only this tenant.")
    var tenant: String?

    @Option(help: "The device (or channel) token as hex: whole, or its first 1 to 4 bytes.")
    var token: String?

    @Option(help: "The legacy identifier: decimal, or hex with 0x.")
    var identifier: String?

    @Option(name: .customLong("apns-id"), help: "The apns-id the bridge sent.")
    var apnsID: String?

    @Option(help: "APNs' HTTP status (200, 400, 410, …; 0: no answer).")
    var status: Int?

    @Flag(help: "Only notifications APNs did not accept.")
    var failures = false

    @Option(help: "Only since then: 30m, 2h, 1d, or an ISO 8601 time.")
    var since: String?

    @Option(help: "The most entries printed (1 to 10000).")
    var limit = 50

    @Option(help: "table, json or csv.")
    var format: String = "table"

    @Option(help: "Seconds to wait for each instance.")
    var timeout: Double = 10

    func validate() throws {
        if self.store != nil, !self.admins.isEmpty {
            throw ValidationError("--store reads the store, --admin running bridges: give one of them")
        }
        guard PushLogFormat(rawValue: self.format) != nil else {
            throw ValidationError("--format \(self.format): expected table, json or csv")
        }
        guard (1...PushLogQuery.maximumLimit).contains(self.limit) else {
            throw ValidationError("--limit \(self.limit): expected 1 to \(PushLogQuery.maximumLimit)")
        }
        if let token = self.token {
            guard let bytes = PushLogQuery.hexBytes(token), !bytes.isEmpty else {
                throw ValidationError("--token: expected hex digits, two per byte")
            }
        }
        _ = try self.sinceMilliseconds(now: Date())
        _ = try self.query(now: Date())
    }

    func run() async throws {
        let now = Date()
        if let store = self.store {
            try await self.readStore(store, now: now)
            return
        }
        let parameters = try self.parameters(now: now)
        let admins =
            self.admins.isEmpty
            ? [ProcessInfo.processInfo.environment["APNS_BRIDGE_ADMIN_LISTEN"] ?? "127.0.0.1:9180"] : self.admins
        var records: [PushLogRecord] = []
        var unread = 0
        let path =
            "/push-log?"
            + parameters.map {
                "\($0.name)=\($0.value.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")"
            }
            .joined(separator: "&")
        for admin in admins {
            do {
                records += try await Self.read(admin, path: path, timeout: self.timeout)
            } catch {
                unread += 1
                FileHandle.standardError.write(Data("apns-bridge log: \(admin): \(error)\n".utf8))
            }
        }
        records.sort {
            ($0.receivedMilliseconds, $0.sequence) > ($1.receivedMilliseconds, $1.sequence)
        }
        let shown = Array(records.prefix(self.limit))
        print(PushLogFormat(rawValue: self.format)!.render(shown, instances: admins), terminator: "")
        if unread > 0 { throw ExitCode(1) }
    }

    /// The failures kept in the store, newest first.
    private func readStore(_ location: String, now: Date) async throws {
        var logger = Logger(label: "apns-bridge.log")
        logger.logLevel = .warning
        var query = try self.query(now: now)
        query.failuresOnly = true
        let records: [PushLogRecord]
        do {
            records = try await BridgeStoreLocation.withReader(location, logger: logger) { [query] reader in
                try await reader.pushFailures(matching: query).map(PushLogRecord.init(stored:))
            }
        } catch {
            FileHandle.standardError.write(
                Data("apns-bridge log: \(BridgeStoreLocation.redacted(location)): \(error)\n".utf8)
            )
            throw ExitCode(1)
        }
        print(
            PushLogFormat(rawValue: self.format)!.render(records, instances: [BridgeStoreLocation.redacted(location)]),
            terminator: ""
        )
    }

    struct Refused: Error, CustomStringConvertible {
        var description: String
    }

    /// One instance's entries, each naming it.
    private static func read(_ admin: String, path: String, timeout: Double) async throws -> [PushLogRecord] {
        guard let address = SettingsReader.parseAddress(admin) else {
            throw ValidationError("expected HOST:PORT")
        }
        let (status, body) = try await AdminProbe.request(
            host: address.host,
            port: address.port,
            path: path,
            timeout: .milliseconds(Int64(timeout * 1000))
        )
        guard status == 200 else {
            throw Refused(description: "HTTP \(status): \(body.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        var page = try JSONDecoder().decode(PushLogPage.self, from: Data(body.utf8))
        for index in page.entries.indices {
            page.entries[index].instance = admin
        }
        return page.entries
    }

    /// The query as `/push-log` takes it: a whole token goes as its hash only.
    private func parameters(now: Date) throws -> [(name: String, value: String)] {
        var parameters: [(name: String, value: String)] = [("limit", "\(self.limit)")]
        if let tenant { parameters.append(("tenant", tenant)) }
        if let token, let bytes = PushLogQuery.hexBytes(token) {
            if bytes.count <= 4 {
                parameters.append(("token", token))
            } else {
                let hash = String(PushLog.tokenHash(bytes), radix: 16)
                parameters.append(("token_hash", String(repeating: "0", count: 16 - hash.count) + hash))
            }
        }
        if let identifier { parameters.append(("identifier", identifier)) }
        if let apnsID { parameters.append(("apns_id", apnsID)) }
        if let status { parameters.append(("status", "\(status)")) }
        if self.failures { parameters.append(("failures", "1")) }
        if let since = try self.sinceMilliseconds(now: now) { parameters.append(("since", "\(since)")) }
        return parameters
    }

    /// The parameters read back as the server will: a bad value fails here, before any request.
    private func query(now: Date) throws -> PushLogQuery {
        do {
            return try PushLogQuery(parameters: try self.parameters(now: now))
        } catch let error as PushLogQuery.ParameterError {
            throw ValidationError("\(error)")
        }
    }

    /// `--since` as milliseconds since 1970.
    private func sinceMilliseconds(now: Date) throws -> UInt64? {
        guard let since else { return nil }
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        if let unit = since.last.flatMap({ units[$0] }), let count = Double(since.dropLast()), count >= 0 {
            return UInt64(max(0, (now.timeIntervalSince1970 - count * unit) * 1000))
        }
        if let date = try? Date(since, strategy: Date.ISO8601FormatStyle()) {
            return UInt64(max(0, date.timeIntervalSince1970 * 1000))
        }
        throw ValidationError("--since \(since): expected 30m, 2h, 1d or an ISO 8601 time (2026-11-29T14:00:00Z)")
    }
}

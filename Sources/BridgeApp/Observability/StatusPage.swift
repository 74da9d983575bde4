import BridgeCore
import BridgeForwarding
import BridgeServer
import BridgeStores
import Foundation
import LegacyProtocol
import Prometheus
import Synchronization
import UpstreamAPNs

/// The metrics as the admin port exports them, read back: one value per series.
struct MetricsReading: Sendable {
    /// `name{labels}` (as in the exposition text) → value.
    var series: [String: Double]

    init(_ registry: PrometheusCollectorRegistry) {
        self.init(text: String(decoding: registry.emitToBuffer(), as: UTF8.self))
    }

    init(text: String) {
        var series: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                continue
            }
            series[String(line[..<space])] = value
        }
        self.series = series
    }

    /// The sum of every series of `name` whose labels include each of `labels` (`key="value"`).
    func sum(_ name: String, _ labels: [String] = []) -> Double {
        self.series.reduce(0) { total, entry in
            let (key, value) = entry
            guard key == name || key.hasPrefix(name + "{") else { return total }
            return labels.allSatisfy(key.contains) ? total + value : total
        }
    }
}

/// The admin port's `/`: a page for people, rendered on the server (no JavaScript), refreshed
/// by the browser every 10 s. Everything on it comes from the metrics (sampled every few
/// seconds for the rates of the last minute), the settings in force, the upstream pools, the
/// store and the push log (its latest failures, and a search by token, identifier or apns-id:
/// StatusPage+PushLog); it shows no secret, and no whole token unless `pushLog.fullTokens` is on.
final class StatusPage: Sendable {
    private struct Sample {
        var time: Date
        var reading: MetricsReading
    }

    private struct State {
        var samples: [Sample] = []
        /// Failure series (`apns_bridge_notifications_failed_total{…}`) → when it last grew.
        var lastFailures: [String: (time: Date, count: Double)] = [:]
    }

    private let registry: PrometheusCollectorRegistry
    private let reloader: ConfigurationReloader
    private let forwarder: ReloadableForwarder
    private let store: any BridgeStore
    private let migration: MigrationView
    private let expiry: CertificateExpiry
    let pushLog: PushLog?
    private let startedAt = Date()
    private let state = Mutex(State())

    init(
        registry: PrometheusCollectorRegistry,
        reloader: ConfigurationReloader,
        forwarder: ReloadableForwarder,
        store: any BridgeStore,
        migration: MigrationView,
        expiry: CertificateExpiry,
        pushLog: PushLog? = nil
    ) {
        self.registry = registry
        self.reloader = reloader
        self.forwarder = forwarder
        self.store = store
        self.migration = migration
        self.expiry = expiry
        self.pushLog = pushLog
    }

    /// Takes a reading of the metrics (every 5 s): the rates of the last minute come from the
    /// oldest reading within it.
    func sample() {
        let now = Date()
        let reading = MetricsReading(self.registry)
        self.state.withLock { state in
            // Counters start at zero with the process: the first reading compares with that.
            let previous = state.samples.last?.reading
            for (key, value) in reading.series where key.hasPrefix("apns_bridge_notifications_failed_total{") {
                let before = previous?.series[key] ?? 0
                if value > before {
                    state.lastFailures[key] = (now, value - before)
                }
            }
            state.samples.append(Sample(time: now, reading: reading))
            state.samples.removeAll { now.timeIntervalSince($0.time) > 65 }
            if state.samples.count > 100 {  // pages requested very often add samples too
                state.samples.removeFirst(state.samples.count - 100)
            }
        }
    }

    /// The page for a request target: its query, if any, searches the push log.
    func render(uri: String = "/") async -> String {
        self.sample()  // errors since the last periodic sample show at once
        let settings = await self.reloader.settings
        let pending = try? await self.store.pendingCount()
        let now = Date()
        let current = MetricsReading(self.registry)
        let (oldest, failures) = self.state.withLock { state in
            (state.samples.first { now.timeIntervalSince($0.time) <= 65 }, state.lastFailures)
        }
        var html = """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="10">
            <title>apns-bridge status</title>
            <style>
            body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}table{border-collapse:collapse;margin-bottom:1.5em}
            th,td{border:1px solid #ccc;padding:.3em .7em;text-align:left}th{background:#f3f3f3}td.n{text-align:right}
            .bad{color:#b00020;font-weight:bold}.ok{color:#1b5e20}svg{display:block}
            .wide{overflow-x:auto;max-width:100%;margin-bottom:1.5em}.wide table{margin-bottom:0}td.verdict{min-width:12em;max-width:24em}
            </style></head><body>
            <h1>apns-bridge</h1>
            <p>Version \(Self.escape(BridgeVersion.description)) · upstream HTTP/2 engine \(settings.upstream.client.engine) · up \(Self.duration(now.timeIntervalSince(self.startedAt))) · \
            page rendered \(Self.time(now)), refreshed every 10 s · <a href="/metrics">/metrics</a> · <a href="/readyz">/readyz</a></p>

            """

        // Rates over the last minute.
        html += "<h2>Last minute</h2>\n"
        if let oldest, now.timeIntervalSince(oldest.time) >= 1 {
            let seconds = now.timeIntervalSince(oldest.time)
            func rate(_ name: String, _ labels: [String] = []) -> String {
                String(format: "%.1f/s", max(0, current.sum(name, labels) - oldest.reading.sum(name, labels)) / seconds)
            }
            html += "<table><tr><th>over the last \(Int(seconds.rounded())) s</th><th>rate</th></tr>\n"
            for (title, name, labels) in [
                ("received from providers", "apns_bridge_notifications_received_total", [String]()),
                ("forwarded to APNs", "apns_bridge_notifications_forwarded_total", []),
                ("accepted (200)", "apns_bridge_notifications_total", [#"outcome="accepted""#]),
                ("unregistered (410)", "apns_bridge_notifications_total", [#"outcome="unregistered""#]),
                ("rejected (error-response)", "apns_bridge_notifications_total", [#"outcome="rejected""#]),
                ("dropped (after 429s)", "apns_bridge_notifications_total", [#"outcome="dropped""#]),
                ("upstream retries", "apns_bridge_upstream_retries_total", []),
                ("broadcasts forwarded (channel tokens)", "apns_bridge_broadcasts_forwarded_total", []),
                ("broadcasts failed", "apns_bridge_broadcasts_failed_total", []),
            ] {
                html += "<tr><td>\(title)</td><td class=n>\(rate(name, labels))</td></tr>\n"
            }
            html += "</table>\n"
        } else {
            html += "<p>Measuring: the first rates appear a few seconds after start.</p>\n"
        }

        // Now.
        let inFlight = Int(current.sum("apns_bridge_notifications_in_flight"))
        html += "<h2>Now</h2>\n<table>\n"
        html +=
            "<tr><td>provider connections (gateway)</td><td class=n>\(Int(current.sum("apns_bridge_legacy_connections", [#"listener="gateway""#])))</td></tr>\n"
        html +=
            "<tr><td>feedback connections</td><td class=n>\(Int(current.sum("apns_bridge_legacy_connections", [#"listener="feedback""#])))</td></tr>\n"
        html += "<tr><td>notifications in flight</td><td class=n>\(inFlight)</td></tr>\n"
        html +=
            "<tr><td>feedback backlog (tokens waiting for a poller)</td><td class=n>\(pending.map(String.init) ?? "unknown (store not answering)")</td></tr>\n"
        html +=
            "<tr><td>notifications received since start</td><td class=n>\(Int(current.sum("apns_bridge_notifications_received_total")))</td></tr>\n"
        html += "</table>\n"

        // Tenants and credentials.
        let members = self.forwarder.members
        html +=
            "<h2>Tenants</h2>\n<table><tr><th>tenant</th><th>certificate UID</th><th>topic</th><th>environment</th><th>credentials</th><th>credential health</th></tr>\n"
        let tenants = settings.tenants
        for rule in tenants.rules {
            let environment = rule.environment ?? tenants.defaultEnvironment
            let credentials = rule.credentials ?? settings.defaultCredentials
            html += "<tr><td>\(Self.escape(rule.name))</td><td>\(Self.escape(rule.userID ?? "(by fingerprint)"))</td>"
            html +=
                "<td>\(Self.escape(rule.topic ?? rule.userID ?? "(the certificate's UID)"))</td><td>\(environment.rawValue)</td>"
            html +=
                "<td>\(Self.escape(credentials))</td><td>\(Self.health(members[credentials], environment))</td></tr>\n"
        }
        if tenants.acceptsUnlistedCertificates {
            let credentials = settings.defaultCredentials
            html +=
                "<tr><td colspan=3>any other certificate with a UID (tenant and topic: its UID)</td><td>\(tenants.defaultEnvironment.rawValue)</td>"
            html +=
                "<td>\(Self.escape(credentials))</td><td>\(Self.health(members[credentials], tenants.defaultEnvironment))</td></tr>\n"
        }
        html += "</table>\n"
        html += Self.channelsTable(tenants.rules)
        html += await self.migrationSection(knownTenants: tenants.rules.map(\.name), now: now)
        html +=
            "<table><tr><th>credentials</th><th>kind</th><th>connections to APNs (production / sandbox)</th><th>unanswered</th></tr>\n"
        for (name, source) in settings.credentials.sorted(by: { $0.key < $1.key }) {
            let kind: String
            switch source {
            case .signingKey(_, let keyID, let teamID): kind = "signing key \(keyID), team \(teamID)"
            case .certificate: kind = "certificate"
            case .pkcs12: kind = "certificate (PKCS#12)"
            }
            let member = members[name]
            let production = member?.client.usableConnectionCount(.production) ?? 0
            let sandbox = member?.client.usableConnectionCount(.sandbox) ?? 0
            html +=
                "<tr><td>\(Self.escape(name))\(name == settings.defaultCredentials ? " (default)" : "")</td><td>\(Self.escape(kind))</td>"
            html += "<td class=n>\(production) / \(sandbox)</td><td class=n>\(member?.inFlight ?? 0)</td></tr>\n"
        }
        html += "</table>\n"

        // Upstream errors.
        html += "<h2>Last upstream and local errors</h2>\n"
        if failures.isEmpty {
            html += "<p class=ok>None since start.</p>\n"
        } else {
            html +=
                "<table><tr><th>last seen</th><th>what the provider saw</th><th>reason</th><th>in that interval</th></tr>\n"
            for (series, seen) in failures.sorted(by: { $0.value.time > $1.value.time }).prefix(10) {
                let reason = Self.label("reason", of: series)
                html +=
                    "<tr><td>\(Self.time(seen.time))</td><td>\(Self.escape(Self.providerSaw(status: Self.label("status", of: series), reason: reason)))</td>"
                html += "<td>\(Self.escape(reason))</td><td class=n>\(Int(seen.count))</td></tr>\n"
            }
            html += "</table>\n"
        }
        html += self.pushLogSection(uri: uri)

        // Certificates.
        html += "<h2>Certificates</h2>\n<table><tr><th>certificate</th><th>expires</th><th>days left</th></tr>\n"
        for (name, date) in self.expiry.dates.sorted(by: { $0.value < $1.value }) {
            let days = Int((date.timeIntervalSince(now) / 86_400).rounded(.down))
            html +=
                "<tr><td>\(Self.escape(name))</td><td>\(Self.time(date))</td><td class=\"n\(days < 14 ? " bad" : "")\">\(days)</td></tr>\n"
        }
        html += "</table>\n</body></html>\n"
        return html
    }

    /// What the provider saw of a failure series (`status` and `reason` labels of
    /// `apns_bridge_notifications_failed_total`): an error-response, or nothing at all: a 410's
    /// token went to the feedback list, a notification given up after 429s was dropped.
    static func providerSaw(status: String, reason: String) -> String {
        if let code = UInt8(status) {
            return "error-response, status \(ErrorResponseStatus(rawValue: code))"
        }
        if reason == "Unregistered" || reason == "ExpiredToken" {
            return "no error-response: token on the feedback list"
        }
        return "no error-response: dropped"
    }

    /// The "Migration" section: per tenant over the last 30 days, from the store (every
    /// instance's usage), with a chart of the days and of this process's last hour.
    private func migrationSection(knownTenants: [String], now: Date) async -> String {
        var html = "<h2>Migration</h2>\n"
        // What was counted up to now is in the charts (a batch only when something changed).
        await self.migration.write()
        let report: MigrationReport
        do {
            report = try await self.migration.report(days: 30, knownTenants: knownTenants)
        } catch {
            return html + "<p class=bad>The store is not answering: \(Self.escape("\(error)"))</p>\n"
        }
        guard !report.rows.isEmpty else {
            return html + "<p>No tenant seen yet.</p>\n"
        }
        html +=
            "<p>Per tenant, over the last 30 days (every instance sharing the store): the tenants blocking the end of the migration first. "
        html += "<code>apns-bridge report</code> prints the same from the store.</p>\n"
        // Wider than a laptop's window with its charts: the table scrolls sideways in its own
        // box (a scroll bar shows there is more), and the verdicts wrap.
        html +=
            "<div class=wide><table><tr><th>tenant</th><th>what stands in the way</th><th>notifications</th><th>per day, 30 days</th><th>per minute, last hour</th>"
        html +=
            "<th>last seen</th><th>feedback last polled</th><th>feedback waiting</th><th>provider certificate ends</th></tr>\n"
        for row in report.rows {
            let lastHour = self.migration.recorder.lastHour(tenant: row.tenant)
            let dayLabels = (0..<row.daily.count).map { UsageDay(number: report.firstDay.number + $0).description }
            let minuteLabels = (0..<lastHour.count).map { "\(lastHour.count - 1 - $0) min ago" }
            html +=
                "<tr><td>\(Self.escape(row.tenant))</td><td class=\"verdict \(row.blocking ? "bad" : "ok")\">\(Self.escape(row.verdict))</td>"
            html += "<td class=n>\(MigrationReport.grouped(row.notifications))</td>"
            html += "<td>\(Self.barChart(row.daily, labels: dayLabels, kind: "daily", tenant: row.tenant))</td>"
            html += "<td>\(Self.barChart(lastHour, labels: minuteLabels, kind: "minutes", tenant: row.tenant))</td>"
            html +=
                "<td>\(row.lastSeen.map(Self.time) ?? "never")</td><td>\(row.feedbackLastPoll.map(Self.time) ?? "never")</td>"
            html += "<td class=n>\(MigrationReport.grouped(Int64(row.feedbackBacklog)))</td>"
            let days = row.certificateExpiry.map { Int(($0.timeIntervalSince(now) / 86_400).rounded(.down)) }
            html +=
                "<td class=\"\((days ?? Int.max) < 14 ? "bad" : "")\">\(row.certificateExpiry.map { "\(Self.time($0)) (\(days!) days)" } ?? "not seen")</td></tr>\n"
        }
        return html + "</table></div>\n"
    }

    /// A small bar chart as inline SVG (no script, no external asset): one bar per value, each
    /// with a tooltip (`label: value`).
    static func barChart(_ values: [Int64], labels: [String], kind: String, tenant: String) -> String {
        let barWidth = 4
        let height = 28
        let peak = max(1, values.max() ?? 0)
        let title =
            "\(tenant): notifications \(kind == "daily" ? "per day" : "per minute"), peak \(MigrationReport.grouped(values.max() ?? 0))"
        var svg =
            "<svg class=\"chart \(kind)\" xmlns=\"http://www.w3.org/2000/svg\" width=\"\(values.count * barWidth)\" height=\"\(height + 1)\" "
        svg += "role=\"img\" aria-label=\"\(Self.escape(title))\"><title>\(Self.escape(title))</title>"
        svg += "<line x1=\"0\" y1=\"\(height)\" x2=\"\(values.count * barWidth)\" y2=\"\(height)\" stroke=\"#bbb\"/>"
        for (index, value) in values.enumerated() where value > 0 {
            let barHeight = max(1, Int((Double(value) / Double(peak) * Double(height)).rounded()))
            svg +=
                "<rect x=\"\(index * barWidth)\" y=\"\(height - barHeight)\" width=\"\(barWidth - 1)\" height=\"\(barHeight)\" fill=\"#1565c0\">"
            svg += "<title>\(Self.escape(index < labels.count ? labels[index] : "")): \(value)</title></rect>"
        }
        return svg + "</svg>"
    }

    /// The tenants' Live Activity channels: name, channel id and storage policy. Channel tokens
    /// are left out, as device tokens are.
    static func channelsTable(_ rules: [TenantRule]) -> String {
        let rows = rules.flatMap { rule in rule.channels.all.map { (tenant: rule.name, channel: $0) } }
        guard !rows.isEmpty else { return "" }
        var html =
            "<table><tr><th>tenant</th><th>broadcast channel</th><th>channel id</th><th>messages stored</th></tr>\n"
        for (tenant, channel) in rows {
            let stored =
                switch channel.storesMessages {
                case true?: "yes (messageStoragePolicy 1)"
                case false?: "no (messageStoragePolicy 0: expiration 0 sent)"
                case nil: "not configured (the frame's expiry sent)"
                }
            html += "<tr><td>\(Self.escape(tenant))</td><td>\(Self.escape(channel.name))</td>"
            html += "<td>\(Self.escape(channel.id))</td><td>\(stored)</td></tr>\n"
        }
        return html + "</table>\n"
    }

    private static func health(_ member: ReloadableForwarder.Member?, _ environment: APNsEnvironment) -> String {
        guard let member else { return "<span class=bad>credentials missing</span>" }
        let usable = member.client.usableConnectionCount(environment)
        return usable > 0
            ? "<span class=ok>\(usable) connection\(usable == 1 ? "" : "s")</span>"
            : "<span class=bad>no usable connection</span>"
    }

    /// A label's value in `name{a="x",b="y"}`.
    static func label(_ label: String, of series: String) -> String {
        guard let start = series.range(of: "\(label)=\"") else { return "" }
        let rest = series[start.upperBound...]
        return String(rest.prefix { $0 != "\"" })
    }

    static func escape(_ text: String) -> String {
        var escaped = ""
        for character in text {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&#39;"
            default: escaped.append(character)
            }
        }
        return escaped
    }

    private static func time(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle())
    }

    private static func duration(_ seconds: TimeInterval) -> String {
        let total = Int(seconds)
        if total < 3600 { return "\(total / 60) min \(total % 60) s" }
        if total < 86_400 { return "\(total / 3600) h \(total % 3600 / 60) min" }
        return "\(total / 86_400) d \(total % 86_400 / 3600) h"
    }
}

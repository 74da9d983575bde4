import BridgeCore
import Foundation

/// The status page's push log (docs/operations.md#did-it-go): the latest notifications APNs did
/// not accept, and a search form whose query (`/?token=…`) lists what matches instead.
extension StatusPage {
    /// Rows shown: the latest failures, or the first matches of a search.
    static let pushLogRows = 20

    func pushLogSection(uri: String) -> String {
        var html = "<h2 id=\"push-log\">Push log</h2>\n"
        guard let pushLog = self.pushLog else {
            return html + "<p>Off (<code>pushLog.entries</code> is 0).</p>\n"
        }
        var query: PushLogQuery
        var problem: String?
        do {
            query = try PushLogQuery(uri: uri)
        } catch {
            query = PushLogQuery()
            problem = "\(error)"
        }
        let searching = query != PushLogQuery()
        let counts = pushLog.counts
        html += """
            <form method="get" action="/#push-log"><label>device token (whole, or its first 1–4 bytes) \
            <input name="token" size="40"></label> <label>identifier <input name="identifier" size="10"></label> \
            <label>apns-id <input name="apns_id" size="36"></label> <button type="submit">Search</button></form>
            <p>This instance holds the last \(counts.held) of \(counts.recorded) notifications (at most \(pushLog.capacity)). \
            <code>apns-bridge log</code> searches every instance.</p>

            """
        if let problem {
            html += "<p class=bad>\(Self.escape(problem))</p>\n"
        }
        if searching {
            query.limit = Self.pushLogRows
            html += "<h3>Found</h3>\n"
        } else {
            query.failuresOnly = true
            query.limit = Self.pushLogRows
            html += "<h3>Latest notifications APNs did not accept</h3>\n"
        }
        let records = pushLog.entries(matching: query).map { PushLogRecord($0) }
        guard !records.isEmpty else {
            return html + (searching ? "<p>None held.</p>\n" : "<p class=ok>None held.</p>\n")
        }
        html +=
            "<div class=wide><table><tr><th>received (UTC)</th><th>tenant</th><th>identifier</th><th>token</th><th>apns-id</th><th>APNs answered</th><th>attempts</th><th>ms</th><th>provider told</th></tr>\n"
        for record in records {
            html += "<tr><td>\(Self.escape(record.received))</td><td>\(Self.escape(record.tenant))</td>"
            html += "<td class=n>\(record.identifier)</td><td>\(Self.escape(PushLogFormat.destination(record)))</td>"
            html +=
                "<td><code>\(Self.escape(record.apnsID))</code></td><td>\(Self.escape(PushLogFormat.answer(record)))</td>"
            html += "<td class=n>\(record.attempts)</td><td class=n>\(String(format: "%.1f", record.milliseconds))</td>"
            html += "<td>\(Self.escape(record.told))</td></tr>\n"
        }
        return html + "</table></div>\n"
    }
}

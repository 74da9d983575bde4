import BridgeApp
import BridgeCore
import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import MockAPNs
import NIOCore
import NIOPosix
import Testing
import Yams

/// The Grafana dashboard and the Prometheus rules in `deploy/` name
/// only metrics the bridge exports, and the admin port's status page shows live numbers.
@Suite("serve: dashboard, alert rules and status page (child process)", .serialized)
struct DeployFilesTests {
    static let packageRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The PromQL expressions of the dashboard's panels.
    static func dashboardExpressions() throws -> [String] {
        let data = try Data(contentsOf: Self.packageRoot.appendingPathComponent("deploy/grafana/apns-bridge.json"))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let panels = try #require(dashboard["panels"] as? [[String: Any]])
        return panels.flatMap { panel in
            ((panel["targets"] as? [[String: Any]]) ?? []).compactMap { $0["expr"] as? String }
        }
    }

    /// The expressions of the alert rules; each rule has a name and an expression.
    static func alertExpressions() throws -> [String] {
        let text = try String(
            contentsOf: Self.packageRoot.appendingPathComponent("deploy/prometheus/alerts.yml"),
            encoding: .utf8
        )
        let document = try #require(try Yams.load(yaml: text) as? [String: Any])
        let groups = try #require(document["groups"] as? [[String: Any]])
        var expressions: [String] = []
        for group in groups {
            for rule in try #require(group["rules"] as? [[String: Any]]) {
                #expect(rule["alert"] is String)
                expressions.append(try #require(rule["expr"] as? String))
            }
        }
        return expressions
    }

    /// The `apns_bridge_*` names an expression uses.
    static func metricNames(in expression: String) -> Set<String> {
        let pattern = try! Regex("apns_bridge_[a-z0-9_]+")
        return Set(expression.matches(of: pattern).map { String(expression[$0.range]) })
    }

    @Test(
        "Every metric the dashboard and the alert rules name is exported; the status page shows live numbers and no token"
    )
    func dashboardAlertsAndStatusPage() async throws {
        let dashboard = try Self.dashboardExpressions()
        let alerts = try Self.alertExpressions()
        #expect(dashboard.count >= 10)
        #expect(alerts.count >= 6)

        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            try await withResource(
                try await BridgeProcess.start(
                    environment,
                    store: "sqlite:\(environment.directory)/store.sqlite",
                    extraArguments: [
                        "--set", "gateway.maximumConnections=1", "--set", "tenants=shop", "--set",
                        "tenant.shop.uid=\(UpstreamHarness.topic)",
                    ]
                )
            ) { bridge in
                let admin = try #require(bridge.adminPort)

                // Traffic that makes every kind of series exist: an accepted notification, a rejected
                // one (an error-response), a connection refused at the cap, a reload.
                let good = FrameBuilder.token(0x600D)
                let bad = FrameBuilder.token(0xBAD)
                environment.mock.script.rejectAsBadToken(bad.hexDump(format: .compact))
                let provider = try await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try environment.provider(),
                    trusting: environment.pki.caCertificate
                )
                var frames = FrameBuilder.frame(.itemized, identifier: 1, token: good, payload: FrameBuilder.payload())
                frames.writeImmutableBuffer(
                    FrameBuilder.frame(.itemized, identifier: 2, token: bad, payload: FrameBuilder.payload())
                )
                try await provider.send(frames)
                var answer = try await provider.bytesUntilClose()
                #expect(answer.readErrorResponse()?.status == .invalidToken)
                // The bridge closes its side after the client's close_notify: until then the
                // connection still counts against the cap of one.
                try await eventually {
                    try PrometheusText(try await ServeProcessTests.get(admin, "/metrics").body).value(
                        #"apns_bridge_legacy_connections{listener="gateway"}"#
                    ) == 0
                }
                let holder = try await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try environment.provider(),
                    trusting: environment.pki.caCertificate
                )
                try await holder.send(
                    FrameBuilder.frame(.itemized, identifier: 3, token: good, payload: FrameBuilder.payload())
                )
                #expect(await environment.mock.ledger.waitForAccepted(2))
                // Closed at accept (the cap is one connection); the connect itself may see the close.
                let refused = try? await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(
                    to: bridge.gatewayAddress
                ).get()
                try? await refused?.closeFuture.get()
                // `apns-bridge reload` gives up after 5 s; a debug bridge on CI's loaded 2-core
                // machine once took longer to answer (2026-11-27). The test waits for the answer,
                // not for the machine's speed; 120 s only bounds a hang.
                let reload = try await AdminProbe.request(
                    host: "127.0.0.1",
                    port: admin,
                    method: "POST",
                    path: "/-/reload",
                    timeout: .seconds(120)
                )
                #expect(reload.status == 200)

                let metrics = try await ServeProcessTests.get(admin, "/metrics").body
                let exported = Set(
                    metrics.split(separator: "\n").compactMap { line -> String? in
                        guard line.hasPrefix("# TYPE ") else { return nil }
                        return line.split(separator: " ").dropFirst(2).first.map(String.init)
                    }
                )
                #expect(exported.contains("apns_bridge_certificate_expiry_timestamp_seconds"))
                #expect(
                    metrics.contains(
                        #"apns_bridge_refused_connections_total{listener="gateway",reason="connections"} 1"#
                    )
                )
                // Every metric of the dashboard and the rules, on a bridge that has served (the fresh
                // bridge's test checks the series that exist before any traffic).
                let served = try await ServeProcessTests.get(admin, "/metrics").body
                let servedNames = Set(
                    served.split(separator: "\n").compactMap { line -> String? in
                        guard line.hasPrefix("# TYPE ") else { return nil }
                        return line.split(separator: " ").dropFirst(2).first.map(String.init)
                    }
                )
                for (file, expressions) in [
                    ("deploy/grafana/apns-bridge.json", dashboard), ("deploy/prometheus/alerts.yml", alerts),
                ] {
                    let names = expressions.reduce(into: Set<String>()) { $0.formUnion(Self.metricNames(in: $1)) }
                    #expect(!names.isEmpty)
                    for name in names.sorted() {
                        let base = ["_bucket", "_count", "_sum"].first(where: name.hasSuffix).map {
                            String(name.dropLast($0.count))
                        }
                        #expect(
                            servedNames.contains(name) || base.map(servedNames.contains) == true,
                            "\(file) names \(name), which the bridge does not export"
                        )
                    }
                }

                // The status page, with the numbers of this run.
                let page = try await ServeProcessTests.get(admin, "/")
                #expect(page.status == 200)
                let html = page.body
                #expect(html.hasPrefix("<!DOCTYPE html>"))
                #expect(html.contains("<meta http-equiv=\"refresh\""))
                #expect(html.contains(BridgeVersion.version))
                #expect(html.contains("provider connections (gateway)</td><td class=n>1<"), "the holder's connection")
                #expect(html.contains("notifications received since start</td><td class=n>3<"))
                #expect(html.contains("<td>tls.certificate</td>"))
                #expect(html.contains("signing key \(UpstreamHarness.keyID)"))
                #expect(html.contains("BadDeviceToken"), "the last upstream error")
                #expect(!html.contains("<script"))
                for token in [good, bad] {
                    #expect(!html.contains(token.hexDump(format: .compact)), "a whole token on the page")
                }
                let keyFile = try String(contentsOfFile: environment.directory + "/AuthKey.p8", encoding: .utf8)
                #expect(!html.contains(keyFile.split(separator: "\n")[1]), "the signing key on the page")
                await holder.close()
            }
        }
    }

    /// The selectors of an expression: each `apns_bridge_*` name with the `label="value"`
    /// matchers after it (regular-expression matchers, such as the dashboard's instance
    /// variable, left out).
    static func selectors(in expression: String) -> [(name: String, labels: [String])] {
        let pattern = try! Regex(#"(apns_bridge_[a-z0-9_]+)(\{[^}]*\})?"#)
        let matcher = try! Regex(#"([a-z_]+)="([^"]*)""#)
        return expression.matches(of: pattern).map { match in
            let name = String(expression[match.output[1].range!])
            let braces = match.output[2].range.map { String(expression[$0]) } ?? ""
            let labels = braces.matches(of: matcher).map { String(braces[$0.range]) }
            return (name, labels)
        }
    }

    @Test("A freshly started bridge exports, before any traffic, every series the dashboard and the alert rules select")
    func everySelectedSeriesExistsFromStart() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            try await withResource(
                try await BridgeProcess.start(
                    environment,
                    store: "sqlite:\(environment.directory)/store.sqlite",
                    extraArguments: ["--set", "tenants=shop", "--set", "tenant.shop.uid=\(UpstreamHarness.topic)"]
                )
            ) { bridge in
                let text = try await ServeProcessTests.get(try #require(bridge.adminPort), "/metrics").body
                let series = try PrometheusText(text).samples.keys
                let selected = try Self.dashboardExpressions() + Self.alertExpressions()
                var checked = 0
                for expression in selected {
                    for (name, labels) in Self.selectors(in: expression) {
                        let exists = series.contains { key in
                            (key == name || key.hasPrefix(name + "{")) && labels.allSatisfy(key.contains)
                        }
                        #expect(
                            exists,
                            "\(name)\(labels.isEmpty ? "" : "{\(labels.joined(separator: ","))}") has no series on a fresh bridge"
                        )
                        checked += 1
                    }
                }
                #expect(checked >= 40)
                // The known tenant's migration gauges, at zero: never seen, never polled, nothing waiting.
                for gauge in [
                    "apns_bridge_tenant_last_seen_timestamp_seconds",
                    "apns_bridge_feedback_last_poll_timestamp_seconds",
                    "apns_bridge_feedback_oldest_entry_timestamp_seconds", "apns_bridge_feedback_pending_by_tenant",
                    "apns_bridge_provider_certificate_expiry_timestamp_seconds",
                ] {
                    #expect(
                        text.contains(#"\#(gauge){tenant="shop"} 0"#)
                            || text.contains(#"\#(gauge){tenant="shop"} 0.0"#),
                        "\(gauge)"
                    )
                }
            }
        }
    }

    @Test(
        "promtool: the alert rules load, and each alert's unit tests pass (deploy/prometheus/alerts.test.yml)",
        .enabled(
            if: interopRequired || executablePath("promtool") != nil,
            "promtool is not installed (Debian: prometheus)"
        )
    )
    func alertRulesPassPromtool() async throws {
        let promtool = try #require(executablePath("promtool"), "install promtool (Debian: prometheus)")
        let folder = Self.packageRoot.appendingPathComponent("deploy/prometheus").path
        let check = try await Self.run(promtool, ["check", "rules", folder + "/alerts.yml"])
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains("SUCCESS: 9 rules found"), "\(check.output)")
        let test = try await Self.run(promtool, ["test", "rules", folder + "/alerts.test.yml"])
        #expect(test.status == 0, "\(test.output)")
        #expect(test.output.contains("SUCCESS"), "\(test.output)")
        // Every alert of the rules has a test.
        let rules = try String(contentsOfFile: folder + "/alerts.yml", encoding: .utf8)
        let tests = try String(contentsOfFile: folder + "/alerts.test.yml", encoding: .utf8)
        let names = rules.matches(of: try Regex(#"- alert: ([A-Za-z]+)"#)).map {
            String(rules[$0.range].dropFirst("- alert: ".count))
        }
        #expect(names.count == 9)
        for name in names {
            #expect(tests.contains("alertname: \(name)\n"), "\(name) has no unit test")
        }
    }

    /// Runs a program with its output in a file (no pipe to fill up), for at most 60 s.
    static func run(_ executable: String, _ arguments: [String]) async throws -> (status: Int32, output: String) {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent(
            "apns-bridge-tool-\(UUID().uuidString)"
        ).path
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        process.standardError = FileHandle.nullDevice
        try process.run()
        _ = try? await eventually("\(executable) to exit", timeout: .seconds(60), interval: .milliseconds(20)) {
            !process.isRunning
        }
        if process.isRunning {
            process.terminate()
            throw TimedOut(what: "\(executable) to exit")
        }
        return (process.terminationStatus, (try? String(contentsOfFile: path, encoding: .utf8)) ?? "")
    }

    @Test(
        "The status page in a real browser (headless Chromium): it renders the live numbers and the push log without JavaScript, and its search finds a notification by whole token",
        .enabled(
            if: interopRequired || executablePath("chromium-headless-shell") != nil,
            "chromium-headless-shell is not installed (Debian: chromium-headless-shell)"
        )
    )
    func statusPageInABrowser() async throws {
        let chromium = try #require(executablePath("chromium-headless-shell"), "install chromium-headless-shell")
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            try await withResource(
                try await BridgeProcess.start(environment, store: "sqlite:\(environment.directory)/store.sqlite")
            ) { bridge in
                let holder = try await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try environment.provider(),
                    trusting: environment.pki.caCertificate
                )
                // Accepted, a 410, a bad token: the error-response comes once the two before it have
                // their outcomes (and the 410's token is on the feedback list).
                let unregistered = FrameBuilder.token(2)
                let bad = FrameBuilder.token(3)
                environment.mock.script.unregister(
                    token: unregistered.hexDump(format: .compact),
                    atMilliseconds: 1_767_225_600_000
                )
                environment.mock.script.rejectAsBadToken(bad.hexDump(format: .compact))
                var frames = FrameBuilder.frame(
                    .itemized,
                    identifier: 1,
                    token: FrameBuilder.token(1),
                    payload: FrameBuilder.payload()
                )
                frames.writeImmutableBuffer(
                    FrameBuilder.frame(.itemized, identifier: 2, token: unregistered, payload: FrameBuilder.payload())
                )
                frames.writeImmutableBuffer(
                    FrameBuilder.frame(.itemized, identifier: 3, token: bad, payload: FrameBuilder.payload())
                )
                let provider = try await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try environment.provider(),
                    trusting: environment.pki.caCertificate
                )
                try await provider.send(frames)
                var answer = try await provider.bytesUntilClose()
                #expect(answer.readErrorResponse()?.status == .invalidToken)

                // --dump-dom prints the document as the browser built it (the page has no script).
                let url = "http://127.0.0.1:\(try #require(bridge.adminPort))/"
                let dom = try await Self.run(chromium, ["--no-sandbox", "--disable-gpu", "--dump-dom", url])
                #expect(dom.status == 0)
                #expect(dom.output.contains("<h1>apns-bridge</h1>"))
                #expect(
                    dom.output.contains("provider connections (gateway)</td><td class=\"n\">1</td>"),
                    "the holder's connection"
                )
                #expect(dom.output.contains("notifications received since start</td><td class=\"n\">3</td>"))
                #expect(dom.output.contains("<td>tls.certificate</td>"))
                // What the provider saw of the failures: an error-response for the bad token, nothing
                // for the 410 (its token went to the feedback list).
                #expect(dom.output.contains("<td>error-response, status 8 (invalid token)</td><td>BadDeviceToken</td>"))
                #expect(
                    dom.output.contains("<td>no error-response: token on the feedback list</td><td>Unregistered</td>")
                )
                #expect(!dom.output.contains("status 8 (invalid token)</td><td>Unregistered"))
                // The migration section: the tenant's line and its two charts, as SVG elements the
                // browser parsed (a bar per day with a value, a bar for this minute).
                let tenant = UpstreamHarness.topic
                #expect(dom.output.contains("<h2>Migration</h2>"))
                #expect(dom.output.contains("still sending: 3 notifications in 30 days"))
                let today = UsageDay(Date()).description
                #expect(dom.output.contains(#"<svg class="chart daily""#))
                #expect(dom.output.contains("<title>\(tenant): notifications per day, peak 3</title>"))
                #expect(dom.output.contains("<title>\(today): 3</title></rect>"))
                #expect(dom.output.contains(#"<svg class="chart minutes""#))
                // Three notifications in this minute's bar (or two bars, if a minute began between them).
                let minuteBars = dom.output.matches(of: try Regex(#"<title>\d+ min ago: (\d+)</title></rect>"#))
                #expect(minuteBars.compactMap { Int(dom.output[$0.output[1].range!]) }.reduce(0, +) == 3)
                #expect(!dom.output.contains("<script"))

                // The push log: the latest failures, each with APNs' answer and what the provider
                // was told; then a search by whole token, which finds the accepted one without
                // printing the token.
                #expect(dom.output.contains("<h3>Latest notifications APNs did not accept</h3>"))
                #expect(dom.output.contains("<td>400 BadDeviceToken</td>"))
                #expect(dom.output.contains("<td>error-response 8 (invalid token)</td>"))
                #expect(dom.output.contains("<td>410 Unregistered</td>"))
                #expect(dom.output.contains("<td>feedback list</td>"))
                let accepted = FrameBuilder.token(1).hexDump(format: .compact)
                let search = try await Self.run(
                    chromium,
                    ["--no-sandbox", "--disable-gpu", "--dump-dom", url + "?token=\(accepted)&identifier=&apns_id="]
                )
                #expect(search.status == 0)
                #expect(search.output.contains("<h3>Found</h3>"))
                let found = search.output.split(separator: "\n").filter {
                    $0.hasPrefix("<tr><td>") && $0.contains("<code>")
                }
                #expect(found.count == 1 && found.first?.contains("<td>200</td>") == true, "\(found)")
                #expect(found.first?.contains("<td>nothing</td>") == true)
                #expect(!search.output.contains(accepted), "the whole token is not on the page")

                // A screenshot: the page renders in the browser (the charts are part of the page).
                let screenshot = environment.directory + "/status.png"
                let shot = try await Self.run(
                    chromium,
                    ["--no-sandbox", "--disable-gpu", "--window-size=1400,2000", "--screenshot=\(screenshot)", url]
                )
                #expect(shot.status == 0)
                let png = try Data(contentsOf: URL(fileURLWithPath: screenshot))
                #expect(png.starts(with: [0x89, 0x50, 0x4E, 0x47]))
                await holder.close()
                await provider.close()
            }
        }
    }
}

import BridgeCore
import BridgeServer
import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import MockAPNs
import NIOCore
import Testing

/// The report's figures match what was sent, across a restart (SQLite) and across two
/// instances sharing one PostgreSQL database, read by `apns-bridge report` from the stopped
/// bridges' store.
@Suite("Migration report: figures against notifications sent (child processes)", .serialized)
struct MigrationReportTests {
    struct ReportDocument: Decodable {
        var days: Int
        var tenants: [MigrationReport.Row]
    }

    static func report(_ store: String, _ arguments: [String] = []) async throws -> (status: Int32, output: String) {
        try await DeployFilesTests.run(BridgeProcess.executable, ["report", "--store", store] + arguments)
    }

    /// One provider connection: three accepted notifications (commands 2, 1, 0), one 410, and a
    /// bad token whose error-response closes the connection: it comes once every earlier
    /// notification has its outcome (the 410's feedback entry committed).
    static func sendMixed(
        to bridge: BridgeProcess,
        _ environment: BridgeProcess.Environment,
        identity: DevelopmentIdentity,
        seed: Int
    ) async throws {
        let unregistered = FrameBuilder.token(seed + 3)
        let bad = FrameBuilder.token(seed + 4)
        environment.mock.script.unregister(
            token: unregistered.hexDump(format: .compact),
            atMilliseconds: 1_767_225_600_000
        )
        environment.mock.script.rejectAsBadToken(bad.hexDump(format: .compact))
        var frames = FrameBuilder.frame(
            .itemized,
            identifier: 1,
            token: FrameBuilder.token(seed),
            payload: FrameBuilder.payload()
        )
        frames.writeImmutableBuffer(
            FrameBuilder.frame(
                .enhanced,
                identifier: 2,
                token: FrameBuilder.token(seed + 1),
                payload: FrameBuilder.payload()
            )
        )
        frames.writeImmutableBuffer(
            FrameBuilder.frame(.simple, token: FrameBuilder.token(seed + 2), payload: FrameBuilder.payload())
        )
        frames.writeImmutableBuffer(
            FrameBuilder.frame(.itemized, identifier: 3, token: unregistered, payload: FrameBuilder.payload())
        )
        frames.writeImmutableBuffer(
            FrameBuilder.frame(.itemized, identifier: 4, token: bad, payload: FrameBuilder.payload())
        )
        let provider = try await LegacyConnection.connect(
            to: bridge.gatewayAddress,
            identity: identity,
            trusting: environment.pki.caCertificate
        )
        try await provider.send(frames)
        var answer = try await provider.bytesUntilClose()
        let response = answer.readErrorResponse()
        #expect(response?.status == .invalidToken)
        #expect(response?.identifier == NotificationIdentifier(rawValue: 4))
    }

    @Test(
        "The report adds up a restarted bridge's days (SQLite) and two instances' (PostgreSQL): notifications by command and outcome, polls, TLS, addresses, certificates",
        arguments: StoreKind.available
    )
    func figuresMatchWhatWasSent(kind: StoreKind) async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let store = kind == .sqlite ? "sqlite:\(environment.directory)/store.sqlite" : try await kind.makeLocation()
            let identity = try environment.provider()
            let tenant = UpstreamHarness.topic

            // Phase 1: one bridge (SQLite: one process per file) or two instances at once.
            let instances = kind == .sqlite ? 1 : 2
            var first: [BridgeProcess] = []
            for index in 0..<instances {
                first.append(try await BridgeProcess.start(environment, store: store, name: "first-\(index)"))
            }
            for (index, bridge) in first.enumerated() {
                let seed = 1_000 * (index + 1)
                try await Self.sendMixed(to: bridge, environment, identity: identity, seed: seed)
                // The 410's entry is committed (the bridge logs it at debug level), then one poll.
                let tokenID = StoreProcessTests.tokenID(FrameBuilder.token(seed + 3))
                try await eventually { StoreProcessTests.storedTokenIDs(in: bridge.log).contains(tokenID) }
                let poll = try await FeedbackPoller.poll(
                    bridge.feedbackAddress,
                    identity: identity,
                    trusting: environment.pki.caCertificate
                )
                #expect(poll.tupleCount == 1)
            }
            for bridge in first {
                await bridge.terminate()
                #expect(!bridge.log.contains("could not write usage"))
            }

            // Phase 2: restarted. Its gauges start from what the store holds.
            let restarted = try await BridgeProcess.start(environment, store: store, name: "restarted")
            let metrics = try PrometheusText(
                try await ServeProcessTests.get(try #require(restarted.adminPort), "/metrics").body
            )
            #expect(metrics.value(#"apns_bridge_tenant_last_seen_timestamp_seconds{tenant="\#(tenant)"}"#) > 0)
            #expect(metrics.value(#"apns_bridge_feedback_last_poll_timestamp_seconds{tenant="\#(tenant)"}"#) > 0)
            #expect(
                metrics.value(#"apns_bridge_provider_certificate_expiry_timestamp_seconds{tenant="\#(tenant)"}"#)
                    > Date().timeIntervalSince1970
            )
            #expect(metrics.samples[#"apns_bridge_feedback_pending_by_tenant{tenant="\#(tenant)"}"#] == 0)
            let provider = try await LegacyConnection.connect(
                to: restarted.gatewayAddress,
                identity: identity,
                trusting: environment.pki.caCertificate
            )
            var frames = ByteBuffer()
            for n in 0..<4 {
                frames.writeImmutableBuffer(
                    FrameBuilder.frame(
                        .itemized,
                        identifier: UInt32(10 + n),
                        token: FrameBuilder.token(9_000 + n),
                        payload: FrameBuilder.payload()
                    )
                )
            }
            let bad = FrameBuilder.token(9_999)
            environment.mock.script.rejectAsBadToken(bad.hexDump(format: .compact))
            frames.writeImmutableBuffer(
                FrameBuilder.frame(.itemized, identifier: 20, token: bad, payload: FrameBuilder.payload())
            )
            try await provider.send(frames)
            var answer = try await provider.bytesUntilClose()
            #expect(answer.readErrorResponse()?.identifier == NotificationIdentifier(rawValue: 20))
            await restarted.terminate()

            // The report, from the stopped bridges' store.
            let json = try await Self.report(store, ["--format", "json", "--days", "7"])
            #expect(json.status == 0)
            let document = try JSONDecoder.iso8601.decode(ReportDocument.self, from: Data(json.output.utf8))
            #expect(document.days == 7)
            let row = try #require(document.tenants.first { $0.tenant == tenant })
            #expect(document.tenants.count == 1)
            let n = Int64(instances)
            #expect(row.notifications == 5 * n + 5)
            #expect(row.byCommand == ["0": n, "1": n, "2": 3 * n + 5])
            #expect(row.accepted == 3 * n + 4)
            #expect(row.unregistered == n)
            #expect(row.broadcast == 0)
            #expect(row.failedByStatus == ["8": n + 1])
            #expect(row.tlsVersions == ["TLSv1.2": n + 1], "one per gateway connection")
            #expect(row.distinctSourceAddresses == 1)
            #expect(row.feedbackPolls == n)
            #expect(row.feedbackTuplesDelivered == n)
            #expect(row.feedbackBacklog == 0)
            #expect(row.certificates.count == 1)
            #expect(row.certificates.first?.subject.contains("UID=\(tenant)") == true, "\(row.certificates)")
            #expect(row.certificates.first?.fingerprint == (try ProviderCertificate(identity.certificate)).fingerprint)
            #expect(row.daily.count == 7 && row.daily.last == 5 * n + 5)
            let firstSeen = try #require(row.firstSeen)
            let lastSeen = try #require(row.lastSeen)
            #expect(firstSeen <= lastSeen && lastSeen <= Date())
            // The test PKI's certificates last 30 days: whether the report names it depends on the
            // second, so only the figure is checked.
            #expect(row.verdict.contains("still sending: \(5 * n + 5) notifications in 7 days, last seen"))
            let expiry = try #require(row.certificateExpiry).timeIntervalSinceNow
            #expect(expiry > 29 * 86_400 && expiry < 31 * 86_400)
            #expect(row.blocking)

            let table = try await Self.report(store)
            #expect(table.status == 0)
            #expect(table.output.contains("WHAT STANDS IN THE WAY"))
            #expect(table.output.contains(tenant))
            #expect(table.output.contains("  \(n)/\(n)/\(3 * n + 5)  "), "commands 0/1/2")
            let csv = try await Self.report(store, ["--format", "csv"])
            let lines = csv.output.split(separator: "\n")
            #expect(lines.count == 2)
            #expect(lines.first?.hasPrefix("tenant,notifications,command_0,command_1,command_2,") == true)
            #expect(lines.last?.hasPrefix("\(tenant),\(5 * n + 5),\(n),\(n),\(3 * n + 5),") == true)
            let other = try await Self.report(store, ["--format", "json", "--tenant", "com.example.other"])
            #expect(
                try JSONDecoder.iso8601.decode(ReportDocument.self, from: Data(other.output.utf8)).tenants.map(\.tenant)
                    == ["com.example.other"]
            )
            let missing = try await Self.report("sqlite:\(environment.directory)/no-such.sqlite")
            #expect(missing.status == 1)
        }
    }
}

extension JSONDecoder {
    static var iso8601: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}

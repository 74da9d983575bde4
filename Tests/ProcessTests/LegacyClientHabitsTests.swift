import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import MockAPNs
import NIOCore
import NIOSSL
import Testing

/// What real legacy clients in other languages do that the project's own client does not
/// (docs/protocol.md, "Resumed TLS sessions"), against `apns-bridge serve`: Java's JSSE and
/// .NET resume their TLS session on every reconnect. Reproduced with `openssl s_client
/// -sess_out/-sess_in` and CPython's `ssl` (`session=`).
/// (In `ServeProcessTests`' serialized suite: these start bridges of their own, and beside the
/// other process tests in a debug build fewer at a time is kinder to everyone's timers.)
extension ServeProcessTests {
    static func frame(_ identifier: UInt32, payload: ByteBuffer = FrameBuilder.payload()) -> ByteBuffer {
        FrameBuilder.frame(
            .itemized,
            identifier: identifier,
            token: FrameBuilder.token(Int(identifier)),
            payload: payload
        )
    }

    static func hex(_ identifier: UInt32) -> String {
        FrameBuilder.token(Int(identifier)).hexDump(format: .compact)
    }

    /// `08 status identifier`.
    static func packet(_ status: ErrorResponseStatus, _ identifier: UInt32) -> [UInt8] {
        var bytes = ByteBuffer()
        bytes.writeErrorResponse(
            ErrorResponsePacket(status: status, identifier: NotificationIdentifier(rawValue: identifier))
        )
        return Array(bytes.readableBytesView)
    }

    /// Frames `good` (delivered), then `bad`, which fails locally (an empty payload: status 4), so
    /// the bridge answers and closes at once.
    static func goodThenEmpty(_ good: UInt32, _ bad: UInt32) -> ByteBuffer {
        var bytes = Self.frame(good)
        bytes.writeImmutableBuffer(Self.frame(bad, payload: ByteBuffer()))
        return bytes
    }

    @Test("python3, openssl and go are available when interop is required")
    func toolsAvailable() {
        #expect(!interopRequired || LegacyHabits.available, "python3 and openssl must be on PATH")
        #expect(!interopRequired || LegacyHabits.goAvailable, "go must be on PATH (Debian: golang-go)")
    }

    @Test(
        "openssl s_client: a resumed session delivers on the gateway and gets its error-response, a resumed poller gets its tuples; after a reload removing the tenant the session is not resumed and the handshake is refused",
        .enabled(if: LegacyHabits.available)
    )
    func opensslResumes() async throws {
        let noWatch = "reload: {watchIntervalSeconds: 0}\n"
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let tenants = [("shop", UpstreamHarness.topic), ("other", ReloadTests.otherBundle)]
            let (bridge, path) = try await ReloadTests.start(
                environment,
                // Watching off: the reload below is this test's, not a watch tick that could
                // come first and leave it nothing to change.
                config: ReloadTests.config(environment, tenants: tenants, extra: noWatch)
            )
            try await withResource(bridge) { bridge in
                let directory = environment.directory
                let files = try LegacyHabits.Files(
                    identity: try environment.provider(),
                    pki: environment.pki,
                    in: directory,
                    name: "shop"
                )
                let gateway = bridge.gatewayAddress.port!
                let feedback = bridge.feedbackAddress.port!
                environment.mock.script.rejectAsBadToken(Self.hex(4))
                environment.mock.script.unregister(token: Self.hex(5), atMilliseconds: 1_767_225_600_000)

                // The gateway: a full handshake, its session saved; then the same session resumed.
                let gatewaySession = directory + "/gateway-session.pem"
                let first = try await LegacyHabits.openssl(
                    port: gateway,
                    files: files,
                    input: try LegacyHabits.file(Self.goodThenEmpty(1, 2), in: directory),
                    sessionOut: gatewaySession
                )
                #expect(first.new, "\(first.run.output.prefix(3000))")
                #expect(first.received(Self.packet(.missingPayload, 2)))
                var frames = Self.frame(3)
                frames.writeImmutableBuffer(Self.frame(4))
                let resumed = try await LegacyHabits.openssl(
                    port: gateway,
                    files: files,
                    input: try LegacyHabits.file(frames, in: directory),
                    sessionIn: gatewaySession
                )
                #expect(resumed.reused, "\(resumed.run.output.prefix(3000))")
                #expect(resumed.received(Self.packet(.invalidToken, 4)), "the resumed connection's error-response")
                #expect(await environment.mock.ledger.waitForAccepted(2))
                let tokens = environment.mock.ledger.records.map(\.token)
                #expect(tokens.filter { $0 == Self.hex(1) }.count == 1)
                #expect(tokens.filter { $0 == Self.hex(3) }.count == 1)
                #expect(tokens.filter { $0 == Self.hex(4) }.count == 1)

                // The feedback port: a poller's session saved on an empty list, then resumed
                // until the entry of a 410 sent meanwhile is committed and served.
                let feedbackSession = directory + "/feedback-session.pem"
                let empty = try await LegacyHabits.openssl(port: feedback, files: files, sessionOut: feedbackSession)
                #expect(empty.new, "\(empty.run.output.prefix(3000))")
                let provider = try await LegacyConnection.connect(
                    to: bridge.gatewayAddress,
                    identity: try environment.provider(),
                    trusting: environment.pki.caCertificate
                )
                try await provider.send(Self.frame(5))
                try await eventually("the 410 of token 5") {
                    environment.mock.ledger.records.contains { $0.token == Self.hex(5) }
                }
                _ = await provider.finish()
                let gone = Array(FrameBuilder.token(5).readableBytesView)
                let poll = try await eventually(
                    "a resumed poll that gets token 5",
                    timeout: .seconds(30),
                    interval: .milliseconds(100)
                ) {
                    let poll = try await LegacyHabits.openssl(port: feedback, files: files, sessionIn: feedbackSession)
                    #expect(poll.reused, "\(poll.run.output.prefix(3000))")
                    return poll.received(gone) ? poll : nil
                }
                #expect(poll.reused)

                // A reload that removes the tenant replaces the TLS context: the saved session is
                // not resumed, and the full handshake is refused.
                try ReloadTests.config(environment, tenants: [("other", ReloadTests.otherBundle)], extra: noWatch)
                    .write(
                        toFile: path,
                        atomically: true,
                        encoding: .utf8
                    )
                let reload = try await ServeStartupTests.runToExitWithOutput([
                    "reload", "--admin", "127.0.0.1:\(try #require(bridge.adminPort))",
                ])
                #expect(reload.status == 0)
                #expect(reload.stdout.contains("tenants removed: shop"))
                let refused = try await LegacyHabits.openssl(
                    port: gateway,
                    files: files,
                    input: try LegacyHabits.file(Self.frame(6), in: directory),
                    sessionIn: gatewaySession
                )
                #expect(!refused.reused)
                #expect(refused.refusedByServer, "the handshake must fail: \(refused.run.error.prefix(3000))")
                let refusedPoll = try await LegacyHabits.openssl(
                    port: feedback,
                    files: files,
                    sessionIn: feedbackSession
                )
                #expect(!refusedPoll.reused)
                #expect(refusedPoll.refusedByServer, "\(refusedPoll.run.error.prefix(3000))")
                #expect(!environment.mock.ledger.records.contains { $0.token == Self.hex(6) })
                #expect(!bridge.log.contains("no verified tenant"))
            }
        }
    }

    @Test(
        "CPython ssl with session=: resumed on the gateway (delivered, error-response) and from the gateway's session on the feedback port (tuples)",
        .enabled(if: LegacyHabits.available)
    )
    func pythonResumes() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            try await withResource(
                try await BridgeProcess.start(environment, store: "sqlite:\(environment.directory)/store.sqlite")
            ) { bridge in
                let directory = environment.directory
                let files = try LegacyHabits.Files(
                    identity: try environment.provider(),
                    pki: environment.pki,
                    in: directory,
                    name: "provider"
                )
                let gateway = bridge.gatewayAddress.port!
                let feedback = bridge.feedbackAddress.port!
                environment.mock.script.rejectAsBadToken(Self.hex(14))
                environment.mock.script.unregister(token: Self.hex(17), atMilliseconds: 1_767_225_600_000)

                var second = Self.frame(13)
                second.writeImmutableBuffer(Self.frame(17))
                second.writeImmutableBuffer(Self.frame(14))
                let connections = try await LegacyHabits.python(
                    "resume",
                    [
                        "127.0.0.1", "\(gateway)", files.certificate, files.privateKey, files.ca, "\(gateway)",
                        try LegacyHabits.file(Self.goodThenEmpty(11, 12), in: directory),
                        try LegacyHabits.file(second, in: directory),
                    ],
                    as: [ResumedConnection].self
                )
                #expect(connections.map(\.reused) == [false, true])
                #expect(
                    connections.map(\.received)
                        == [Self.packet(.missingPayload, 12), Self.packet(.invalidToken, 14)].map {
                            $0.map { String(format: "%02x", $0) }.joined()
                        }
                )
                #expect(await environment.mock.ledger.waitForAccepted(2))
                let tokens = environment.mock.ledger.records.map(\.token)
                for identifier: UInt32 in [11, 13, 14, 17] {
                    #expect(tokens.filter { $0 == Self.hex(identifier) }.count == 1, "token \(identifier)")
                }

                // A session made on the gateway, resumed by a poller (both ports share one TLS
                // context), until the 410's entry is committed and served.
                let gone = FrameBuilder.token(17).hexDump(format: .compact)
                let poll = try await eventually(
                    "a resumed poll that gets token 17",
                    timeout: .seconds(30),
                    interval: .milliseconds(100)
                ) {
                    let connections = try await LegacyHabits.python(
                        "resume",
                        [
                            "127.0.0.1", "\(gateway)", files.certificate, files.privateKey, files.ca, "\(feedback)",
                            try LegacyHabits.file(Self.frame(20, payload: ByteBuffer()), in: directory), "-",
                        ],
                        as: [ResumedConnection].self
                    )
                    #expect(connections.map(\.reused) == [false, true])
                    return connections[1].received.contains(gone) ? connections[1] : nil
                }
                #expect(poll.reused)
                #expect(!bridge.log.contains("refusing a resumed"))
            }
        }
    }

    @Test(
        "A client limited to TLS 1.0 (PushSharp 2.x) without tls.allowLegacyTLS: counted per listener, and logged once per interval naming the key"
    )
    func tls10Refused() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            try await withResource(
                try await BridgeProcess.start(environment, store: "sqlite:\(environment.directory)/store.sqlite")
            ) { bridge in
                for _ in 0..<3 {
                    let client = try? await LegacyConnection.connect(
                        to: bridge.gatewayAddress,
                        identity: try environment.provider(),
                        trusting: environment.pki.caCertificate,
                        minimumTLSVersion: .tlsv1,
                        maximumTLSVersion: .tlsv1
                    )
                    if let client {
                        try? await client.send(Self.frame(1))
                        _ = try? await client.bytesUntilClose(timeout: .seconds(5))
                    }
                }
                let admin = try #require(bridge.adminPort)
                let refused = try await eventually("three refusals counted") { () -> Double? in
                    let value = try PrometheusText(try await ServeProcessTests.get(admin, "/metrics").body).value(
                        #"apns_bridge_refused_tls_versions_total{listener="gateway"}"#
                    )
                    return value == 3 ? value : nil
                }
                #expect(refused == 3)
                let lines = bridge.log.split(separator: "\n").filter { $0.contains("refusing a TLS handshake") }
                #expect(lines.count == 1, "one line per interval: \(lines)")
                #expect(lines.first?.contains("APNS_BRIDGE_TLS_ALLOW_LEGACY_TLS=true") == true)
                #expect(!environment.mock.ledger.records.contains { $0.token == Self.hex(1) })
            }
        }
    }
}

import BridgeServer
import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import Logging
import NIOCore
import Testing

/// The close after an error-response (docs/protocol.md#closing): the packet, the drain (reading
/// and dropping, no close_notify yet), close_notify and FIN, then a wait for the provider's
/// close_notify of at most `tls.closeNotifyWaitSeconds`. A client that only writes (grocer,
/// houston) never sends one; CPython's `ssl` plays it, writing every 10 ms and never reading. A
/// Go client reads the packet with Go's `crypto/tls`, which returns it together with an error
/// when the close already waits behind it.
@Suite("Closing after an error-response")
struct CloseWaitTests {
    struct WriteOnlyRun: Decodable {
        var writes: Int
        var failed_after_seconds: Double?
    }

    /// A new folder with a provider's certificate, key and CA for an external client.
    static func clientFiles(_ harness: GatewayHarness, name: String) throws -> (String, LegacyHabits.Files) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "\(name)-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let files = try LegacyHabits.Files(
            identity: try harness.pki.providerIdentity(bundleID: "com.example.app"),
            pki: harness.pki,
            in: directory,
            name: name
        )
        return (directory, files)
    }

    struct GoErrorResponseRead: Decodable {
        var bytes: Int
        var packet: String
        var error: String
        var heard: Bool
    }

    @Test(
        "A Go client (one Read into 6 bytes after its frames, as timehop/apns reads) hears its error-response without an error beside it, reading at once or 300 ms late, 10 times each",
        .enabled(if: LegacyHabits.goAvailable || interopRequired)
    )
    func goClientHearsItsPacket() async throws {
        // The product's drain (the harness shortens it for other tests).
        let drain = GatewayConfiguration(tls: GatewayConfiguration.loopback(pki: try DevelopmentCA()).tls)
            .errorDrainTime
        try await withResource(try await GatewayHarness.start(configure: { $0.errorDrainTime = drain })) { harness in
            let (directory, files) = try Self.clientFiles(harness, name: "go")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            // A notification that goes through, then one with an empty payload: status 4 at once.
            var frames = FrameBuilder.frame(
                .itemized,
                identifier: 1,
                token: FrameBuilder.token(1),
                payload: FrameBuilder.payload()
            )
            frames.writeImmutableBuffer(
                FrameBuilder.frame(.itemized, identifier: 2, token: FrameBuilder.token(2), payload: ByteBuffer())
            )
            let framesFile = try LegacyHabits.file(frames, in: directory)
            for delay in [0, 300] {
                for attempt in 1...10 {
                    let read = try await LegacyHabits.go(
                        "error-response",
                        [
                            "127.0.0.1", "\(harness.server.localAddress.port!)", files.certificate, files.privateKey,
                            files.ca, framesFile, "\(delay)",
                        ],
                        as: GoErrorResponseRead.self
                    )
                    #expect(
                        read.heard && read.packet == "080400000002",
                        "reading \(delay) ms late, try \(attempt): \(read.bytes) bytes (\(read.packet)), error \(read.error)"
                    )
                }
            }
        }
    }

    @Test(
        "A client that only writes: with a 500 ms drain and a 0.5 s close_notify wait, the bridge's own wait ends the connection (not NIOSSL's 5 s), and the client's writes then fail",
        .enabled(if: LegacyHabits.available)
    )
    func writeOnlyClient() async throws {
        let configure: (inout GatewayConfiguration) -> Void = {
            $0.errorDrainTime = .milliseconds(500)
            $0.tls.closeNotifyWait = .milliseconds(500)
        }
        let log = CapturedLog()
        try await withResource(
            try await GatewayHarness.start(log: log, logLevel: .info, configure: configure)
        ) { harness in
            let (directory, files) = try Self.clientFiles(harness, name: "writer")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            // An empty payload: status 4 at once, and nothing after it is forwarded.
            let first = FrameBuilder.frame(
                .itemized,
                identifier: 1,
                token: FrameBuilder.token(1),
                payload: ByteBuffer()
            )
            let next = FrameBuilder.frame(
                .itemized,
                identifier: 2,
                token: FrameBuilder.token(2),
                payload: FrameBuilder.payload()
            )
            let run = try await LegacyHabits.python(
                "write-only",
                [
                    "127.0.0.1", "\(harness.server.localAddress.port!)", files.certificate, files.privateKey, files.ca,
                    try LegacyHabits.file(first, in: directory), try LegacyHabits.file(next, in: directory),
                    "10", "1500",
                ],
                as: WriteOnlyRun.self
            )
            #expect(run.failed_after_seconds != nil, "no write failed in 1,500 writes (\(run.writes) went out)")
            // The close came from the bridge's wait, with its configured length: the line an
            // operator reads (docs/protocol.md#closing). With NIOSSL's own wait, no such line.
            let closes = log.lines(at: .info).filter {
                $0.message.hasPrefix("the provider did not close after its farewell")
            }
            #expect(closes.count == 1, "\(log.lines.map(\.message))")
            #expect(closes.first?.metadata["close_notify_wait_seconds"] == "0.5")
            #expect(harness.forwarder.ledger.isEmpty, "a frame written after the error was forwarded")
        }
    }
}

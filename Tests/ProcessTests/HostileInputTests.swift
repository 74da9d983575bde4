import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import NIOCore
import Testing

/// Hostile input against `apns-bridge serve` (docs/operations.md, "Logs"): what anyone can send
/// without a trusted certificate must not grow the log without bound.
@Suite("Hostile input: refusals (child processes)", .serialized)
struct HostileInputTests {
    @Test("Certificates from a CA of one's own with a 30,000-character UID: each refusal counted, one short line per 10 s")
    func refusedCertificatesCannotFloodTheLog() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            try await withResource(try await BridgeProcess.start(environment, store: "sqlite:\(environment.directory)/store.sqlite")) { bridge in
                let stranger = try DevelopmentCA(name: "anyone's CA")
                let identity = try stranger.providerIdentity(bundleID: "com.example." + String(repeating: "x", count: 30_000))
                let count = 20
                let started = ContinuousClock.now
                for _ in 0..<count {
                    if let client = try? await LegacyConnection.connect(to: bridge.gatewayAddress, identity: identity, trusting: environment.pki.caCertificate) {
                        _ = try? await client.bytesUntilClose(timeout: .seconds(10))
                    }
                }
                let elapsed = ContinuousClock.now - started
                let admin = try #require(bridge.adminPort)
                try await eventually("\(count) refusals counted") {
                    try PrometheusText(try await ServeProcessTests.get(admin, "/metrics").body).value("apns_bridge_refused_client_certificates_total") == Double(count)
                }
                let lines = bridge.log.split(separator: "\n").filter { $0.contains("refusing a client certificate") }
                // One line per 10-second interval at most, however slow the machine made the loop.
                #expect(!lines.isEmpty)
                #expect(lines.count <= 1 + Int(elapsed / .seconds(10)), "\(lines.count) lines in \(elapsed)")
                #expect(lines.allSatisfy { $0.utf8.count < 1024 }, "the UID is cut: \(lines.map(\.utf8.count))")
                #expect(lines.first?.contains("(30012 bytes)") == true)
                #expect(bridge.log.utf8.count < 200_000, "the whole log: \(bridge.log.utf8.count) bytes")
            }
        }
    }
}

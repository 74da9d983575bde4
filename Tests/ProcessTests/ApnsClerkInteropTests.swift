import BridgeTestSupport
import DevelopmentPKI
import Foundation
import MockAPNs
import NIOCore
import Testing

/// A second real legacy client nobody on the team wrote, with other habits than PyAPNs:
/// apns-clerk (PyPI `apns-clerk` 0.2.0, Tests/Interop/apns_clerk/send_batch.py). It speaks only
/// TLS 1.0 (docs/protocol.md#tls: `tls.allowLegacyTLS`), writes one message to many tokens in 2 KB
/// chunks with identifiers 0, 1, 2, … (each frame's index), and after an error-response resends
/// the tokens after the failed one as a new message numbered from 0 again (docs/protocol.md#resend-records). It
/// then reads the feedback service with its own parser.
///
/// `scripts/test` installs it into .build/interop/apns-clerk (pip, SHA-256 checked); without it
/// the test is skipped, which `.ci/run` (APNS_BRIDGE_REQUIRE_INTEROP=1) turns into a failure.
@Suite("Interop: apns-clerk 0.2.0 over TLS 1.0 (child processes)", .serialized)
struct ApnsClerkInteropTests {
    static let library =
        ProcessInfo.processInfo.environment["APNS_BRIDGE_APNS_CLERK_DIR"]
        ?? PyAPNsInteropTests.packageRoot.appendingPathComponent(".build/interop/apns-clerk").path
    static var available: Bool { FileManager.default.fileExists(atPath: Self.library + "/apns_clerk/__init__.py") }

    /// The token the script derives from an index: 4 bytes big-endian, then 28 × 0xcd.
    static func token(_ index: Int) -> String {
        String(format: "%08x", index) + String(repeating: "cd", count: 28)
    }

    @Test("apns-clerk is available when interop is required")
    func apnsClerkAvailable() {
        #expect(
            !PyAPNsInteropTests.required || Self.available,
            "apns-clerk missing at \(Self.library): run scripts/test, which installs it"
        )
    }

    @Test(
        "300 tokens in one message, a bad one and an unregistered one among them: status 8 for the bad one, the renumbered resend forwarded once, the unregistered token in feedback",
        .enabled(if: ApnsClerkInteropTests.available)
    )
    func batchWithABadAndAnUnregisteredToken() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let count = 300
            let bad = 120
            let unregistered = 200
            environment.mock.script.rejectAsBadToken(Self.token(bad))
            environment.mock.script.unregister(token: Self.token(unregistered), atMilliseconds: 1_767_225_600_000)
            try await withResource(
                try await BridgeProcess.start(
                    environment,
                    store: "sqlite:\(environment.directory)/store.sqlite",
                    extraArguments: ["--set", "tls.allowLegacyTLS=true"]
                )
            ) { bridge in
                let provider = try environment.provider().writePEMFiles(
                    to: environment.directory,
                    name: "apns-clerk-provider"
                )

                let script = PyAPNsInteropTests.packageRoot.appendingPathComponent(
                    "Tests/Interop/apns_clerk/send_batch.py"
                ).path
                let run = try await PyAPNsInteropTests.python([
                    script, Self.library, "127.0.0.1", "\(bridge.gatewayAddress.port!)",
                    "\(bridge.feedbackAddress.port!)",
                    provider.certificate, provider.privateKey, "\(count)", "\(bad)", "\(unregistered)",
                ])
                #expect(run.status == 0, "\(run.error.suffix(3000))")
                let reported = try #require(
                    try JSONSerialization.jsonObject(with: Data(run.output.utf8)) as? [String: Any],
                    "\(run.output) \(run.error.suffix(2000))"
                )
                // apns-clerk matched the error-response's identifier (an index) to the bad token.
                #expect(reported["failed"] as? [String: Int] == [Self.token(bad): 8])
                #expect(reported["sends"] as? Int == 2, "the message, then one resend of what followed the bad token")
                // The script reads the feedback service until the unregistered token's entry is there.
                #expect(reported["feedback"] as? [String] == [Self.token(unregistered)])

                // Every token reached the upstream exactly once (the bad one with its 400): the frames
                // after the bad one that were forwarded before the error-response are recognised in the
                // renumbered resend and not sent again.
                #expect(await environment.mock.ledger.waitForAccepted(count - 2, timeout: .seconds(30)))
                let inFlight = try await Self.waitUntilNothingInFlight(adminPort: try #require(bridge.adminPort))
                #expect(inFlight == 0)
                var arrivals: [String: Int] = [:]
                for record in environment.mock.ledger.records {
                    arrivals[record.token, default: 0] += 1
                }
                for index in 0..<count {
                    #expect(arrivals[Self.token(index)] == 1, "index \(index)")
                }
                #expect(arrivals.count == count)
            }
        }
    }

    /// Polls the bridge's in-flight gauge until it is 0, so that the ledger holds everything the
    /// bridge will ever forward for this run. The gauge also counts the resend records' store
    /// writes, each a commit of its own: on CI's loaded 2-core machine it once still read 43
    /// after the 10 s this wait used to allow (2026-11-27). A failed scrape is tried again;
    /// 120 s only bounds a hang.
    static func waitUntilNothingInFlight(adminPort: Int) async throws -> Int {
        var inFlight = -1
        _ = try? await eventually("nothing in flight", timeout: .seconds(120), interval: .milliseconds(20)) {
            guard let metrics = try? await ServeProcessTests.get(adminPort, "/metrics").body else { return false }
            let line = metrics.split(separator: "\n").first { $0.hasPrefix("apns_bridge_notifications_in_flight ") }
            inFlight = line.flatMap { Double($0.split(separator: " ").last ?? "") }.map { Int($0) } ?? -1
            return inFlight == 0
        }
        return inFlight
    }
}

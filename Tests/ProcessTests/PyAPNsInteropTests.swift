import BridgeTestSupport
import DevelopmentPKI
import Foundation
import MockAPNs
import NIOCore
import Testing

/// A real legacy client nobody on the team wrote: PyAPNs (PyPI `apns` 2.0.1) in enhanced mode,
/// with a minimal Python 3 syntax port (Tests/Interop/pyapns/port_to_python3.py), sends 1,000
/// notifications through `apns-bridge serve` to MockAPNs; one in the middle goes to a token
/// APNs rejects. PyAPNs must get status 8 for it and, after its own resend, every other
/// notification must reach the upstream exactly once.
///
/// `scripts/test` downloads the sdist into .build/interop (pip, SHA-256 checked); without it
/// the test is skipped, which `.ci/run` (APNS_BRIDGE_REQUIRE_INTEROP=1) turns into a failure.
@Suite("Interop: PyAPNs 2.0.1 (child processes)", .serialized)
struct PyAPNsInteropTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    static let sdist =
        ProcessInfo.processInfo.environment["APNS_BRIDGE_PYAPNS_SDIST"]
        ?? Self.packageRoot.appendingPathComponent(".build/interop/apns-2.0.1.tar.gz").path
    static let required = ProcessInfo.processInfo.environment["APNS_BRIDGE_REQUIRE_INTEROP"] == "1"
    static var available: Bool { FileManager.default.fileExists(atPath: Self.sdist) }

    /// The token the script derives from an identifier: 4 bytes big-endian, then 28 × 0xab.
    static func token(_ identifier: Int) -> String {
        String(format: "%08x", identifier) + String(repeating: "ab", count: 28)
    }

    @Test("PyAPNs is available when interop is required")
    func pyAPNsAvailable() {
        #expect(
            !Self.required || Self.available,
            "PyAPNs sdist missing at \(Self.sdist): run scripts/test, which downloads it"
        )
    }

    @Test(
        "1,000 notifications with a bad token in the middle: status 8 for it, every other one upstream exactly once",
        .enabled(if: PyAPNsInteropTests.available)
    )
    func thousandWithABadToken() async throws {
        try await withResource(try await BridgeProcess.Environment.make()) { environment in
            let count = 1000
            let bad = 500
            environment.mock.script.rejectAsBadToken(Self.token(bad))
            try await withResource(
                try await BridgeProcess.start(environment, store: "sqlite:\(environment.directory)/store.sqlite")
            ) { bridge in
                let provider = try environment.provider().writePEMFiles(
                    to: environment.directory,
                    name: "pyapns-provider"
                )

                let ported = environment.directory + "/pyapns"
                try FileManager.default.createDirectory(atPath: ported, withIntermediateDirectories: true)
                let fixtures = Self.packageRoot.appendingPathComponent("Tests/Interop/pyapns").path
                let port = try await Self.python([fixtures + "/port_to_python3.py", Self.sdist, ported])
                #expect(port.status == 0, "\(port.error)")

                let run = try await Self.python([
                    fixtures + "/send_notifications.py", ported, "127.0.0.1", "\(bridge.gatewayAddress.port!)",
                    provider.certificate, provider.privateKey, "\(count)", "\(bad)",
                ])
                #expect(run.status == 0, "\(run.error.suffix(3000))")
                let reported = try JSONSerialization.jsonObject(with: Data(run.output.utf8)) as? [[String: Int]]
                #expect(reported == [["status": 8, "identifier": bad]])

                #expect(await environment.mock.ledger.waitForAccepted(count - 1, timeout: .seconds(30)))
                try await Task.sleep(for: .milliseconds(500))  // anything extra would arrive now
                var arrivals: [String: Int] = [:]
                for record in environment.mock.ledger.records {
                    arrivals[record.token, default: 0] += 1
                }
                for identifier in 1...count {
                    #expect(arrivals[Self.token(identifier)] == 1, "identifier \(identifier)")
                }
                #expect(arrivals.count == count)
                #expect(environment.mock.ledger.records.filter { $0.token == Self.token(bad) }.map(\.status) == [400])
            }
        }
    }

    /// Runs python3 to its end (3 minutes at most).
    static func python(_ arguments: [String]) async throws -> ChildRun {
        try await ChildRun.run("python3", arguments)
    }
}

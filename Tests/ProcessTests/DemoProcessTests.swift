import BridgeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The README's first command, `apns-bridge demo`, as a newcomer runs it (docs/internals.md,
/// "The lifecycle of `serve`"): its round trip runs beside the bridge's services once they are up.
/// `--keep-running` here; `.ci/run` runs plain `swift run apns-bridge demo` itself (one demo at
/// a time: each is a mock, a bridge and its clients, heavy beside the other tests in a debug build).
extension ServeStartupTests {
    /// The demo's output must show the whole round trip: the error-response, the resend, the
    /// broadcast and the feedback tuple.
    static func checkRoundTrip(_ output: String) {
        #expect(output.contains("← error-response: status 8 (invalid token), identifier 00000005"), "\(output)")
        #expect(output.contains("POST /4/broadcasts/apps/com.example.demo"), "\(output)")
        #expect(output.contains("← feedback tuple: timestamp 1767225600"), "\(output)")
        #expect(output.contains("then a clean close (1 tuple)"), "\(output)")
    }

    /// Lines at error or critical level in the demo's log (standard error).
    static func errorLines(_ log: String) -> [Substring] {
        log.split(separator: "\n").filter { line in
            let level = line.split(separator: " ", maxSplits: 2).dropFirst().first
            return level == "error" || level == "critical"
        }
    }

    @Test(
        "demo --keep-running: the status page and /metrics answer at the printed address; apns-bridge log finds each notification with the apns-id the mock received; SIGTERM exits 0 with nothing at error level"
    )
    func keepRunning() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let outputPath = folder.appendingPathComponent("stdout").path
        let errorPath = folder.appendingPathComponent("stderr").path
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        _ = FileManager.default.createFile(atPath: errorPath, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: BridgeProcess.executable)
        process.arguments = ["demo", "--keep-running"]
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errorPath))
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        func output() -> String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }

        let adminPort = try await eventually("the demo's instructions", timeout: .seconds(120)) { () -> Int? in
            if !process.isRunning {
                throw DemoExited(status: process.terminationStatus, output: output())
            }
            guard output().contains("The bridge keeps running"),
                let line = output().split(separator: "\n").first(where: { $0.contains("curl http://127.0.0.1:") })
            else { return nil }
            return Int(line.split(separator: ":").last?.split(separator: "/").first ?? "")
        }
        Self.checkRoundTrip(output())
        let metrics = try await ServeProcessTests.get(adminPort, "/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.body.contains("apns_bridge_notifications_forwarded_total"))
        let page = try await ServeProcessTests.get(adminPort, "/")
        #expect(page.status == 200)
        #expect(page.body.contains("<html"))
        try await Self.checkPushLog(adminPort: adminPort, demoOutput: output())
        #expect(process.isRunning, "it keeps running until a signal")

        kill(process.processIdentifier, SIGTERM)
        try await eventually("the demo to exit after SIGTERM", timeout: .seconds(60)) { !process.isRunning }
        #expect(process.terminationStatus == 0)
        let log = (try? String(contentsOfFile: errorPath, encoding: .utf8)) ?? ""
        #expect(Self.errorLines(log).isEmpty, "\(log.suffix(3000))")
    }

    struct DemoExited: Error, CustomStringConvertible {
        var status: Int32
        var output: String
        var description: String { "the demo exited \(self.status) before it was ready: \(self.output.suffix(3000))" }
    }
}

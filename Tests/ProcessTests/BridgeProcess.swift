import BridgeTestSupport
import Crypto
import DevelopmentPKI
import Foundation
import LegacyClient
import MockAPNs
import NIOCore
import NIOPosix
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `apns-bridge serve` as a child process, for tests that kill it or run two of it: the
/// certificates and signing key are written to a folder, the ports are picked by the process
/// (port 0) and read from its `ready` line, and its log goes to a file.
final class BridgeProcess: @unchecked Sendable {
    /// What every bridge process of one test shares: the PKI, the signing key and MockAPNs.
    struct Environment: Sendable {
        var directory: String
        var pki: DevelopmentCA
        var mock: MockAPNsServer
        var arguments: [String]

        static func make() async throws -> Environment {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "apns-bridge-process-\(UUID().uuidString)"
            ).path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let pki = try DevelopmentCA()
            let server = try pki.server.writePEMFiles(to: directory, name: "server")
            let caPath = directory + "/ca.pem"
            try pki.caCertificatePEM.write(toFile: caPath, atomically: true, encoding: .utf8)
            let signingKey = P256.Signing.PrivateKey()
            let keyPath = directory + "/AuthKey.p8"
            try signingKey.pemRepresentation.write(toFile: keyPath, atomically: true, encoding: .utf8)

            var configuration = MockAPNsConfiguration(
                certificateChain: [pki.server.certificate],
                privateKey: pki.server.privateKey
            )
            configuration.port = 0
            configuration.signingKeys = [
                .init(keyID: UpstreamHarness.keyID, teamID: UpstreamHarness.teamID, publicKey: signingKey.publicKey)
            ]
            configuration.topics = [UpstreamHarness.topic]
            let mock = try await MockAPNsServer.start(configuration: configuration, logger: .forTests())
            let arguments = [
                "serve",
                "--gateway", "127.0.0.1:0",
                "--feedback", "127.0.0.1:0",
                "--admin", "127.0.0.1:0",
                "--certificate", server.certificate,
                "--private-key", server.privateKey,
                "--client-ca", caPath,
                "--environment", "sandbox",
                "--signing-key", "\(UpstreamHarness.keyID):\(UpstreamHarness.teamID):\(keyPath)",
                "--upstream", "127.0.0.1:\(mock.port)",
                "--upstream-ca", caPath,
                "--upstream-server-name", "localhost",
                "--log-level", "debug",
                // A request unanswered for the request timeout (10 s by default) is reset and
                // sent again, and is delivered twice if the mock had processed it. These tests
                // count deliveries at the mock, and the test process (which runs the mock) has
                // stalled for over 10 s in a debug build with every suite running on 2 cores:
                // the timeout and the budget here only bound a hang.
                "--set", "upstream.requestTimeoutSeconds=\(UpstreamHarness.requestTimeout.nanoseconds / 1_000_000_000)",
                "--set", "upstream.retryBudgetSeconds=\(UpstreamHarness.retryBudget.nanoseconds / 1_000_000_000)",
            ]
            return Environment(directory: directory, pki: pki, mock: mock, arguments: arguments)
        }

        func provider() throws -> DevelopmentIdentity {
            try self.pki.providerIdentity(bundleID: UpstreamHarness.topic)
        }

        func close() async {
            await self.mock.close()
            try? FileManager.default.removeItem(atPath: self.directory)
        }
    }

    let process: Process
    let logPath: String
    let gatewayAddress: SocketAddress
    let feedbackAddress: SocketAddress
    /// The admin port (`/metrics`, `/healthz`, `/readyz`), when it is on.
    let adminPort: Int?

    private init(process: Process, logPath: String, gatewayPort: Int, feedbackPort: Int, adminPort: Int?) throws {
        self.process = process
        self.logPath = logPath
        self.gatewayAddress = try SocketAddress(ipAddress: "127.0.0.1", port: gatewayPort)
        self.feedbackAddress = try SocketAddress(ipAddress: "127.0.0.1", port: feedbackPort)
        self.adminPort = adminPort
    }

    /// The `apns-bridge` built next to the test bundle.
    static var executable: String {
        let besideTests = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("apns-bridge").path
        if FileManager.default.isExecutableFile(atPath: besideTests) { return besideTests }
        let package = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return package.appendingPathComponent(".build/release/apns-bridge").path
    }

    /// - Parameters:
    ///   - arguments: replaces the environment's arguments (which `extraArguments` follow).
    ///   - variables: added to the child's environment (`APNS_BRIDGE_*` settings).
    static func start(
        _ environment: Environment,
        store: String,
        arguments: [String]? = nil,
        extraArguments: [String] = [],
        variables: [String: String] = [:],
        name: String = UUID().uuidString
    ) async throws -> BridgeProcess {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable)
        process.arguments = (arguments ?? environment.arguments) + ["--store", store] + extraArguments
        process.environment = ProcessInfo.processInfo.environment.merging(variables) { $1 }
        // Files, not pipes: the child never blocks on a full pipe, and what it wrote before a
        // SIGKILL is all there.
        let logPath = "\(environment.directory)/bridge-\(name).log"
        let outputPath = "\(environment.directory)/bridge-\(name).out"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        try process.run()

        let ready: Substring
        do {
            ready = try await eventually("the bridge's ready line", timeout: .seconds(30)) {
                let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
                if let line = output.split(separator: "\n").first(where: { $0.hasPrefix("ready ") }) { return line }
                if !process.isRunning {
                    let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
                    throw BridgeProcessFailed(
                        reason: "exited with \(process.terminationStatus) before it was ready: \(log.suffix(2000))"
                    )
                }
                return nil
            }
        } catch let error as TimedOut {
            process.terminate()
            throw error
        }
        let fields = Dictionary(
            uniqueKeysWithValues: ready.split(separator: " ").dropFirst().compactMap { field -> (String, Int)? in
                let parts = field.split(separator: "=")
                guard parts.count == 2, let port = Int(parts[1]) else { return nil }
                return (String(parts[0]), port)
            }
        )
        return try BridgeProcess(
            process: process,
            logPath: logPath,
            gatewayPort: fields["gateway"] ?? 0,
            feedbackPort: fields["feedback"] ?? 0,
            adminPort: fields["admin"]
        )
    }

    struct BridgeProcessFailed: Error, CustomStringConvertible {
        var reason: String
        var description: String { "apns-bridge serve: \(self.reason)" }
    }

    var log: String {
        (try? String(contentsOfFile: self.logPath, encoding: .utf8)) ?? ""
    }

    /// Kilobytes: the resident set now (`VmRSS`) or at its peak (`VmHWM`).
    func memory(_ field: String) -> Int? {
        guard
            let status = try? String(contentsOfFile: "/proc/\(self.process.processIdentifier)/status", encoding: .utf8)
        else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix(field + ":") {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1])
        }
        return nil
    }

    /// SIGKILL, then waits until the process is gone.
    func kill() async {
        Glibc.kill(self.process.processIdentifier, SIGKILL)
        await self.reap()
    }

    /// SIGTERM (the graceful shutdown), then waits up to 30 s.
    func terminate() async {
        await self.stop(with: SIGTERM)
    }

    /// Sends `signal` (SIGTERM or SIGINT: the graceful shutdown), then waits for the exit.
    func stop(with signal: Int32) async {
        Glibc.kill(self.process.processIdentifier, signal)
        await self.reap()
    }

    /// The log's lines at error or critical level (the level is the line's second field).
    var errorLines: [Substring] {
        self.log.split(separator: "\n").filter { line in
            let level = line.split(separator: " ", maxSplits: 2).dropFirst().first
            return level == "error" || level == "critical"
        }
    }

    /// For a failure's message: the `/metrics` lines whose names contain one of `names`, and how
    /// many upstream attempts the log says got no answer ("no metrics" when the process is gone
    /// or has no admin port).
    func diagnostics(_ names: [String]) async -> String {
        let unanswered = self.log.split(separator: "\n").count { $0.contains("an attempt got no answer") }
        guard let port = self.adminPort, let metrics = try? await ServeProcessTests.get(port, "/metrics").body else {
            return "no metrics; attempts without an answer: \(unanswered)"
        }
        let lines = metrics.split(separator: "\n").filter { line in
            !line.hasPrefix("#") && names.contains { line.contains($0) }
        }
        return lines.joined(separator: "; ") + "; attempts without an answer: \(unanswered)"
    }

    /// Waits until Foundation has seen the process exit. (Not `waitpid` here: Foundation reaps
    /// the child itself, and a `waitpid` that loses that race returns at once.)
    ///
    /// A process still running after 60 s fails the test (and is killed): what the test checks
    /// next (its store, its output) must not be read beside a bridge that still runs.
    private func reap() async {
        do {
            try await eventually("the bridge to exit", timeout: .seconds(60)) { !self.process.isRunning }
        } catch {
            Issue.record(
                "apns-bridge (pid \(self.process.processIdentifier)) did not exit within 60 s; killed. Its log ends: \(self.log.suffix(2000))"
            )
            Glibc.kill(self.process.processIdentifier, SIGKILL)
            _ = try? await eventually("the bridge to exit after SIGKILL", timeout: .seconds(30)) {
                !self.process.isRunning
            }
        }
    }
}

extension BridgeProcess: ScopedResource {
    /// SIGTERM, and the wait for the exit.
    func cleanUp() async { await self.terminate() }
}

extension BridgeProcess.Environment: ScopedResource {
    func cleanUp() async { await self.close() }
}

import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `apns-bridge serve` as a child process, configured for one run: loopback ports picked by
/// the process (read from its `ready` line), SQLite in the workspace, log at warning unless
/// told otherwise.
final class BridgeChild: @unchecked Sendable {
    let process: Process
    let gatewayPort: Int
    let feedbackPort: Int
    let adminPort: Int
    let logPath: String

    private init(process: Process, gatewayPort: Int, feedbackPort: Int, adminPort: Int, logPath: String) {
        self.process = process
        self.gatewayPort = gatewayPort
        self.feedbackPort = feedbackPort
        self.adminPort = adminPort
        self.logPath = logPath
    }

    var stats: ProcessStats { ProcessStats(pid: self.process.processIdentifier) }

    static func start(
        executable: String,
        workspace: Workspace,
        upstreamPort: Int,
        upstreamConnections: Int,
        extraSettings: [String] = [],
        logLevel: String = "warning",
        store: String? = nil
    ) async throws -> BridgeChild {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw LoadToolError(
                "no apns-bridge at \(executable): build it with `swift build -c release --product apns-bridge` in the repository root, or pass --bridge"
            )
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        var arguments = [
            "serve",
            "--gateway", "127.0.0.1:0",
            "--feedback", "127.0.0.1:0",
            "--admin", "127.0.0.1:0",
            "--certificate", workspace.serverCertificatePath,
            "--private-key", workspace.serverKeyPath,
            "--client-ca", workspace.caPath,
            "--environment", "sandbox",
            "--signing-key", "\(Workspace.keyID):\(Workspace.teamID):\(workspace.signingKeyPath)",
            "--upstream", "127.0.0.1:\(upstreamPort)",
            "--upstream-ca", workspace.caPath,
            "--upstream-server-name", "localhost",
            "--store", store ?? "sqlite:\(workspace.directory)/bridge-\(UUID().uuidString).sqlite",
            "--log-level", logLevel,
            "--set", "upstream.connectionsPerPool=\(upstreamConnections)",
            "--set", "gateway.maximumConnections=20000",
        ]
        for setting in extraSettings { arguments += ["--set", setting] }
        process.arguments = arguments
        let name = UUID().uuidString
        let logPath = "\(workspace.directory)/bridge-\(name).log"
        let outputPath = "\(workspace.directory)/bridge-\(name).out"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        try process.run()

        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
            if let line = output.split(separator: "\n").first(where: { $0.hasPrefix("ready ") }) {
                var ports: [String: Int] = [:]
                for field in line.split(separator: " ").dropFirst() {
                    let parts = field.split(separator: "=")
                    if parts.count == 2, let port = Int(parts[1]) { ports[String(parts[0])] = port }
                }
                let child = BridgeChild(
                    process: process,
                    gatewayPort: ports["gateway"] ?? 0,
                    feedbackPort: ports["feedback"] ?? 0,
                    adminPort: ports["admin"] ?? 0,
                    logPath: logPath
                )
                try await child.waitUntilReady()
                return child
            }
            if !process.isRunning {
                let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
                throw LoadToolError(
                    "apns-bridge exited with \(process.terminationStatus) before it was ready: \(log.suffix(2000))"
                )
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        process.terminate()
        throw LoadToolError("apns-bridge was not ready within 30 s")
    }

    /// `/readyz` answers 200 once the upstream connections are up.
    private func waitUntilReady() async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let (status, _) = try? await httpGet(port: self.adminPort, path: "/readyz"), status == 200 { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw LoadToolError("apns-bridge /readyz did not answer 200 within 30 s")
    }

    /// A counter or gauge from `/metrics`, summed over label sets whose labels contain `labels`.
    func metric(_ name: String, labels: String = "") async throws -> Double {
        let (_, body) = try await httpGet(port: self.adminPort, path: "/metrics")
        var total = 0.0
        for line in body.split(separator: "\n") where line.hasPrefix(name) && !line.hasPrefix("#") {
            let parts = line.split(separator: " ")
            guard parts.count >= 2 else { continue }
            let series = parts[0]
            guard series == name || series.hasPrefix(name + "{") else { continue }
            if !labels.isEmpty && !series.contains(labels) { continue }
            total += Double(parts[1]) ?? 0
        }
        return total
    }

    var log: String { (try? String(contentsOfFile: self.logPath, encoding: .utf8)) ?? "" }

    /// SIGTERM, then waits for the exit (polled: `waitUntilExit()` spins off the main thread).
    func stop() {
        self.signal(SIGTERM)
    }

    /// SIGKILL, then waits for the exit.
    func kill() {
        self.signal(SIGKILL)
    }

    private func signal(_ signal: Int32) {
        guard self.process.isRunning else { return }
        Glibc.kill(self.process.processIdentifier, signal)
        let deadline = ContinuousClock.now + .seconds(60)
        while self.process.isRunning, ContinuousClock.now < deadline { usleep(5_000) }
    }
}

/// A plain HTTP/1.1 GET on loopback (the bridge's admin port), with a blocking socket on a
/// detached task: status and body.
func httpGet(port: Int, path: String) async throws -> (Int, String) {
    try await Task.detached {
        guard let fd = connectLoopback(port: port) else { throw LoadToolError("cannot connect to 127.0.0.1:\(port)") }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        _ = request.withCString { send(fd, $0, strlen($0), 0) }
        var response = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = recv(fd, &chunk, chunk.count, 0)
            if count <= 0 { break }
            response.append(contentsOf: chunk[0..<count])
        }
        let text = String(decoding: response, as: UTF8.self)
        guard let statusLine = text.split(separator: "\r\n").first, statusLine.split(separator: " ").count >= 2,
            let status = Int(statusLine.split(separator: " ")[1])
        else { throw LoadToolError("no HTTP answer from 127.0.0.1:\(port)\(path)") }
        let body = text.range(of: "\r\n\r\n").map { String(text[$0.upperBound...]) } ?? ""
        return (status, body)
    }.value
}

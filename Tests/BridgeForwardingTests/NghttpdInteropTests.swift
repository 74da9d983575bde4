import BridgeCore
import BridgeTestSupport
import Crypto
import DevelopmentPKI
import Foundation
import LegacyClient
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Testing
import UpstreamAPNs

#if canImport(Glibc)
import Glibc
#endif

@Suite("Interop: the upstream client against nghttpd (nghttp2, C)")
struct NghttpdInteropTests {
    @Test(
        "nghttpd --echo-upload receives the client's POSTs over TLS + h2 and answers 200",
        .enabled(
            if: interopRequired || executablePath("nghttpd") != nil,
            "nghttpd is not installed (Debian: nghttp2-server)"
        )
    )
    func nghttpdEchoUpload() async throws {
        let nghttpd = try #require(executablePath("nghttpd"), "install nghttp2-server")
        let pki = try DevelopmentCA()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "apns-bridge-nghttpd-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let files = try pki.server.writePEMFiles(to: directory, name: "server")
        let port = try await freeLoopbackPort()

        let process = Process()
        // stdbuf: nghttpd's log is line-buffered, so nothing is lost when it is terminated.
        process.executableURL = URL(fileURLWithPath: "/usr/bin/stdbuf")
        process.arguments = [
            "-oL", nghttpd, "--echo-upload", "--verbose", "--address=127.0.0.1", "--htdocs=\(directory)", "\(port)",
            files.privateKey, files.certificate,
        ]
        // A file, not a pipe: nghttpd would block once a pipe's buffer is full.
        let logPath = directory + "/nghttpd.log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let logFile = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardOutput = logFile
        process.standardError = logFile
        try process.run()
        // nghttpd does not exit on SIGTERM: it is killed (here if the test throws; `stop` below
        // kills it and waits for it otherwise).
        defer { kill(process.processIdentifier, SIGKILL) }
        try await waitForListener(port: port)

        let signer = AuthenticationTokenSigner(key: .init(), keyID: "KEY1234567", teamID: "TEAM123456")
        // The client on its own, as someone who only wants an APNs client would use it.
        let client = try APNsClient(
            endpoint: APNsEndpoint(
                host: "127.0.0.1",
                port: port,
                serverHostname: "localhost",
                trustRoots: .certificates([pki.caCertificate])
            ),
            credentials: .token(AuthenticationTokenSource(signer: signer, logger: .forTests())),
            logger: .forTests()
        )
        defer { client.shutdown() }

        let count = 200
        let ids = APNsIDGenerator()
        let results = try await withThrowingTaskGroup(of: APNsSendResult.self) { group in
            for seed in 0..<count {
                let request = APNsRequest(
                    deviceToken: FrameBuilder.token(seed),
                    topic: UpstreamHarness.topic,
                    pushType: .alert,
                    priority: 10,
                    expiration: 0,
                    id: ids.nextID(),
                    payload: FrameBuilder.payload()
                )
                group.addTask {
                    try await client.send(request, on: MultiThreadedEventLoopGroup.singleton.any()).get()
                }
            }
            return try await group.reduce(into: [APNsSendResult]()) { $0.append($1) }
        }
        #expect(results.count == count)
        #expect(results.allSatisfy { if case .answered(let response) = $0 { response.status == 200 } else { false } })

        try await stop(process, signal: SIGKILL)
        try logFile.close()
        let log = try String(contentsOfFile: logPath, encoding: .utf8)
        // nghttpd's verbose log shows each request's headers as it decoded them.
        let posts = log.components(separatedBy: ":method: POST").count - 1
        let paths = log.components(separatedBy: ":path: /3/device/").count - 1
        #expect(posts == count, "nghttpd logged \(posts) POSTs")
        #expect(paths == count)
        #expect(log.contains("apns-topic: \(UpstreamHarness.topic)"))
        #expect(log.contains("apns-push-type: alert"))
        #expect(log.contains(":status: 200"))
    }
}

/// Stops a child process with `signal` and waits until it has exited; one still running after
/// 5 s is killed, and waited for. (`waitUntilExit()` can hang when called from a task.)
func stop(_ process: Process, signal: Int32 = SIGTERM) async throws {
    kill(process.processIdentifier, signal)
    var deadline = ContinuousClock.now + .seconds(5)
    var status: Int32 = 0
    while process.isRunning, waitpid(process.processIdentifier, &status, WNOHANG) == 0 {
        if ContinuousClock.now > deadline {
            kill(process.processIdentifier, SIGKILL)
            deadline = ContinuousClock.now + .seconds(60)
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// A port that was free a moment ago on 127.0.0.1.
func freeLoopbackPort() async throws -> Int {
    let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(
        host: "127.0.0.1",
        port: 0
    ).get()
    let port = channel.localAddress!.port!
    try await channel.close()
    return port
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port` (10 s at most).
func waitForListener(port: Int) async throws {
    let channel = try await eventually("a listener on port \(port)", interval: .milliseconds(20)) {
        try? await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port)
            .get()
    }
    try? await channel.close()
}

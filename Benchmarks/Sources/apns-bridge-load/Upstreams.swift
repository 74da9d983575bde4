import Crypto
import DevelopmentPKI
import Foundation
import Logging
import MockAPNs
import NIOCore
import NIOSSL

/// The upstream the bridge (or the client anchor) sends to.
enum UpstreamKind: String, CaseIterable, Sendable {
    /// The project's MockAPNs, in this process: it times each arrival and finds duplicates.
    case mock
    /// nghttpd (Debian's nghttp2-server) serving empty files at /3/device/<token>: 200 to each
    /// POST, at C speed. It reports nothing per request, so arrivals are counted by the bridge
    /// (its `upstream_responses_total{status="200"}`) and latency is not measured.
    case nghttpd
}

/// Tokens nghttpd serves (one empty file each).
let nghttpdDistinctTokens = 1_024

final class RunningUpstream: @unchecked Sendable {
    let kind: UpstreamKind
    let port: Int
    private let mock: MockAPNsServer?
    private let process: Process?

    private init(kind: UpstreamKind, port: Int, mock: MockAPNsServer?, process: Process?) {
        self.kind = kind
        self.port = port
        self.mock = mock
        self.process = process
    }

    /// The mock answers 410 Unregistered for every token from now on.
    func unregisterEveryToken() {
        self.mock?.script.unregisterEveryToken(atMilliseconds: 1_767_225_600_000)
    }

    static func start(
        _ kind: UpstreamKind,
        workspace: Workspace,
        tracker: ArrivalTracker?,
        responseDelay: TimeAmount = .zero
    ) async throws -> RunningUpstream {
        switch kind {
        case .mock:
            var configuration = MockAPNsConfiguration(
                certificateChain: [workspace.pki.server.certificate],
                privateKey: workspace.pki.server.privateKey
            )
            configuration.port = 0
            configuration.recordsRequests = false
            configuration.signingKeys = [
                .init(keyID: Workspace.keyID, teamID: Workspace.teamID, publicKey: workspace.signingKey.publicKey)
            ]
            configuration.topics = [Workspace.topic]
            if let tracker {
                configuration.onAnswer = { record in tracker.markArrived(LoadToken.number(fromHex: record.token)) }
            }
            var logger = Logger(label: "mock-apns")
            logger.logLevel = .warning
            let mock = try await MockAPNsServer.start(configuration: configuration, logger: logger)
            if responseDelay > .zero { mock.script.delayResponses(by: responseDelay) }
            return RunningUpstream(kind: kind, port: mock.port, mock: mock, process: nil)
        case .nghttpd:
            let root = workspace.directory + "/nghttpd-root"
            let device = root + "/3/device"
            try FileManager.default.createDirectory(atPath: device, withIntermediateDirectories: true)
            for number in 0..<nghttpdDistinctTokens {
                _ = FileManager.default.createFile(
                    atPath: device + "/" + LoadToken.hex(UInt64(number)),
                    contents: Data()
                )
            }
            let port = try freePort()
            let process = Process()
            process.executableURL = URL(fileURLWithPath: try which("nghttpd"))
            // One worker thread, as in the PERFORMANCE-NOTES measurements.
            process.arguments = [
                "-d", root, "--address=127.0.0.1", "\(port)", workspace.serverKeyPath, workspace.serverCertificatePath,
            ]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            try await waitForListener(port: port)
            return RunningUpstream(kind: kind, port: port, mock: nil, process: process)
        }
    }

    func stop() async {
        await self.mock?.close()
        if let process = self.process, process.isRunning {
            // SIGKILL: nghttpd keeps going after SIGTERM while connections are open. Polled,
            // not `waitUntilExit()`, which spins on a thread that is not the main one.
            kill(process.processIdentifier, SIGKILL)
            while process.isRunning { try? await Task.sleep(for: .milliseconds(5)) }
        }
    }
}

struct LoadToolError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The full path of a program on PATH.
func which(_ program: String) throws -> String {
    for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
        let path = "\(directory)/\(program)"
        if FileManager.default.isExecutableFile(atPath: path) { return path }
    }
    throw LoadToolError("\(program) not found on PATH (Debian: apt-get install nghttp2-server nghttp2-client)")
}

/// A loopback port nothing listens on now.
func freePort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
    }
    guard bound == 0 else { throw LoadToolError("cannot bind a loopback port") }
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Waits until something accepts TCP connections on a loopback port (10 s at most).
func waitForListener(port: Int) async throws {
    let deadline = ContinuousClock.now + .seconds(10)
    while ContinuousClock.now < deadline {
        if let fd = connectLoopback(port: port) {
            close(fd)
            return
        }
        try await Task.sleep(for: .milliseconds(20))
    }
    throw LoadToolError("nothing listens on 127.0.0.1:\(port) after 10 s")
}

/// A blocking TCP socket connected to 127.0.0.1:`port`, or nil.
func connectLoopback(port: Int) -> Int32? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = UInt16(port).bigEndian
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard connected == 0 else {
        close(fd)
        return nil
    }
    return fd
}

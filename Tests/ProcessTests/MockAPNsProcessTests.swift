import BridgeCore
import BridgeForwarding
import BridgeTestSupport
import Crypto
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Testing
import UpstreamAPNs

#if canImport(Glibc)
import Glibc
#endif

/// `apns-bridge mock-apns` stops promptly on SIGTERM even while a client keeps
/// its HTTP/2 connections open (before, each connection's TLS shutdown waited up to 5 s for the
/// client's close_notify, one connection after another).
@Suite("mock-apns: SIGTERM with clients connected (child process)")
struct MockAPNsProcessTests {
    @Test("SIGTERM with four open HTTP/2 connections: the counters are printed and the process exits at once")
    func sigtermWithOpenConnections() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "apns-bridge-mock-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let signingKey = P256.Signing.PrivateKey()
        try signingKey.pemRepresentation.write(toFile: directory + "/AuthKey.p8", atomically: true, encoding: .utf8)
        let outputPath = directory + "/out"
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)

        let process = Process()
        process.executableURL = URL(fileURLWithPath: BridgeProcess.executable)
        process.arguments = [
            "mock-apns", "--port", "0", "--write-ca", directory + "/ca.pem",
            "--signing-key", "\(UpstreamHarness.keyID):\(UpstreamHarness.teamID):\(directory)/AuthKey.p8",
        ]
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        process.standardError = FileHandle.nullDevice
        try process.run()
        defer { if process.isRunning { process.terminate() } }

        // "mock APNs listening on 127.0.0.1:PORT"
        let port: Int? = try? await eventually("the mock's listening line", timeout: .seconds(30)) {
            let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
            let line = output.split(separator: "\n").first { $0.hasPrefix("mock APNs listening on") }
            return line?.split(separator: ":").last.flatMap { Int($0) } ?? (process.isRunning ? nil : -1)
        }
        let mockPort = try #require(port.flatMap { $0 < 0 ? nil : $0 }, "the mock did not say where it listens")

        var configuration = APNsForwarder.Configuration()
        let endpoint = APNsEndpoint(
            host: "127.0.0.1",
            port: mockPort,
            serverHostname: "localhost",
            trustRoots: .certificates(try NIOSSLCertificate.fromPEMFile(directory + "/ca.pem"))
        )
        configuration.endpoints = [.sandbox: endpoint, .production: endpoint]
        configuration.client.connectionsPerPool = 4
        let tokens = AuthenticationTokenSource(
            signer: AuthenticationTokenSigner(
                key: signingKey,
                keyID: UpstreamHarness.keyID,
                teamID: UpstreamHarness.teamID
            ),
            logger: .forTests()
        )
        let client = try APNsForwarder(
            configuration: configuration,
            credentials: .token(tokens),
            logger: .forTests()
        )
        defer { client.shutdown() }
        let eventLoop = MultiThreadedEventLoopGroup.singleton.any()
        for seed in 1...8 {
            #expect(try await client.send(UpstreamHarness.notification(seed), on: eventLoop).get() == .accepted)
        }
        client.warmUp(.sandbox)
        try await eventually { client.usableConnectionCount(.sandbox) == 4 }

        let signalled = ContinuousClock.now
        kill(process.processIdentifier, SIGTERM)
        _ = try? await eventually("the mock to exit", timeout: .seconds(30)) { !process.isRunning }
        let took = ContinuousClock.now - signalled
        #expect(!process.isRunning)
        #expect(process.terminationStatus == 0)
        // The requirement is 2 s; the bound here is loose so that a loaded machine cannot fail
        // it, and still far below the 4 × 5 s the sequential close could take.
        #expect(took < .seconds(5), "took \(took)")
        let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        #expect(output.contains("answered 8 (200: 8)"))
        print("mock-apns exited \(took) after SIGTERM with 4 open connections")
    }

    @Test(
        "A malformed option (--unregistered, --fail, --signing-key) is refused before anything is bound or written",
        arguments: [
            ["--unregistered", "abcdef"], ["--fail", "2:500"], ["--signing-key", "KEYONLY"],
        ]
    )
    func malformedOptionRefusedFirst(_ option: [String]) async throws {
        let run = try await ServeStartupTests.runToExitWithOutput(["mock-apns", "--port", "0"] + option)
        #expect(run.status == 64, "a usage error: \(run.stderr)")
        #expect(run.stderr.contains(option[0]), "names the option: \(run.stderr)")
        #expect(!run.stdout.contains("listening"), "\(run.stdout)")
        #expect(!run.stdout.contains("throwaway CA written"), "\(run.stdout)")
    }
}

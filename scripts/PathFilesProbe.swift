// Not part of the package: scripts/path-files copies it into a copy of the tree, built with code
// coverage (the only build these profile-runtime functions link in).
import BridgeApp
import BridgeServer
import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import MockAPNs
import NIOCore
import Testing

@_silgen_name("__llvm_profile_reset_counters") func resetCoverageCounters()
@_silgen_name("__llvm_profile_set_filename") func setCoverageFile(_ name: UnsafePointer<CChar>)
@_silgen_name("__llvm_profile_write_file") func writeCoverageFile() -> Int32

/// One notification APNs refuses (400 `BadDeviceToken`) through `serve` as the product runs it,
/// with the counters of code coverage reset when its frame is sent and written when its
/// connection has closed: the files whose code ran in between are its path.
@Suite("path files")
struct PathFilesProbe {
    @Test("one notification refused upstream, from its bytes to the close")
    func refusedNotification() async throws {
        let profile = try #require(ProcessInfo.processInfo.environment["PATH_FILES_PROFILE"])
        let files = try ConfigurationFiles()
        defer { files.remove() }
        try await withResource(try await ServeInProcessTests.mock(files)) { mock in
            let badToken = FrameBuilder.token(0xBAD)
            mock.script.rejectAsBadToken(badToken.hexDump(format: .compact))
            let settings = try await ServeInProcessTests.settings(files, mock: mock)
            let provider = try files.pki.providerIdentity(bundleID: UpstreamHarness.topic)
            let ca = files.pki.caCertificate
            try await BridgeRuntime.serve(settings, metrics: nil, logger: .forTests()) { running in
                // Warm-up: the upstream connection, the authentication token, the first-use
                // paths of the refusal, on connections of their own.
                for round in 0..<3 {
                    let warm = try await LegacyConnection.connect(
                        to: running.addresses.gateway,
                        identity: provider,
                        trusting: ca
                    )
                    try await warm.send(ServeInProcessTests.frame(UInt32(round), token: FrameBuilder.token(round + 5)))
                    try await warm.send(ServeInProcessTests.frame(9, token: badToken))
                    _ = try await warm.bytesUntilClose()
                    await warm.close()
                }
                let connection = try await LegacyConnection.connect(
                    to: running.addresses.gateway,
                    identity: provider,
                    trusting: ca
                )
                try await connection.send(ServeInProcessTests.frame(1, token: FrameBuilder.token(77)))
                // Its answer back through the bridge: in the push log (read on the admin port,
                // before the counters are reset).
                let admin = try #require(running.addresses.admin?.port)
                let token = FrameBuilder.token(77).hexDump(format: .compact)
                try await eventually("the connection's first notification answered") {
                    let page = try await AdminProbe.request(host: "127.0.0.1", port: admin, path: "/push-log?token=\(token)")
                    return page.body.contains("\"accepted\"")
                }

                resetCoverageCounters()
                try await connection.send(ServeInProcessTests.frame(2, token: badToken))
                var answer = try await connection.bytesUntilClose()
                #expect(answer.readErrorResponse()?.status == .invalidToken)
                await connection.close()
                // The bridge's side of the close (the registry's callback) comes just after the
                // client saw it. Nothing the probe could poll runs no code of the bridge's own
                // (the admin port would count in the profile), so this waits a little instead.
                try await Task.sleep(for: .milliseconds(500))
                setCoverageFile(profile)
                _ = writeCoverageFile()
                setCoverageFile(profile + ".rest")

                await running.shutdown()
            }
        }
    }
}

import BridgeApp
import BridgeServer
import BridgeTestSupport
import Crypto
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import MockAPNs
import NIOCore
import NIOPosix
import Synchronization
import Testing

/// `serve` as `apns-bridge serve` runs it (``BridgeRuntime/serve(_:source:metrics:logLevel:logger:ready:)``),
/// inside the test process: port 0 for every listener, a mock APNs as its upstream, SQLite as
/// its store. The child-process tests (ProcessTests) cover signals and exit codes; these cover
/// the lifecycle itself.
@Suite("serve, in process")
struct ServeInProcessTests {
    /// The bridge's settings over `files`, with `mock` as the sandbox upstream.
    static func settings(_ files: ConfigurationFiles, mock: MockAPNsServer) async throws -> BridgeSettings {
        var flags = files.basics
        flags["gateway.listen"] = "127.0.0.1:0"
        flags["feedback.listen"] = "127.0.0.1:0"
        flags["admin.listen"] = "127.0.0.1:0"
        flags["environment"] = "sandbox"
        flags["store.url"] = "sqlite:" + files.directory + "/store.sqlite"
        flags["upstream.sandbox"] = "127.0.0.1:\(mock.port)"
        flags["upstream.ca"] = files.directory + "/provider-ca.pem"
        flags["upstream.serverName"] = "localhost"
        return try BridgeSettings.load(from: try await SettingsReader(flags: flags, environment: [:], file: nil))
    }

    /// A mock APNs that takes the authentication tokens `files`' signing key makes.
    static func mock(_ files: ConfigurationFiles) async throws -> MockAPNsServer {
        let key = try P256.Signing.PrivateKey(
            pemRepresentation: try String(contentsOfFile: files.directory + "/AuthKey.p8", encoding: .utf8)
        )
        var configuration = MockAPNsConfiguration(
            certificateChain: [files.pki.server.certificate],
            privateKey: files.pki.server.privateKey
        )
        configuration.port = 0
        // The key id and team id of ConfigurationFiles.basics.
        configuration.signingKeys = [.init(keyID: "KEY1234567", teamID: "TEAM123456", publicKey: key.publicKey)]
        configuration.topics = [UpstreamHarness.topic]
        return try await MockAPNsServer.start(configuration: configuration, logger: .forTests())
    }

    static func frame(_ identifier: UInt32, token: ByteBuffer) -> ByteBuffer {
        FrameBuilder.frame(.itemized, identifier: identifier, token: token, payload: FrameBuilder.payload())
    }

    @Test(
        "serve: a rejected notification's error-response, a notification forwarded, and a graceful shutdown that says status 10 to a provider still connected"
    )
    func serveSendAndShutDown() async throws {
        let files = try ConfigurationFiles()
        defer { files.remove() }
        try await withResource(try await Self.mock(files)) { mock in
            let badToken = FrameBuilder.token(0xBAD)
            mock.script.rejectAsBadToken(badToken.hexDump(format: .compact))
            let settings = try await Self.settings(files, mock: mock)
            let provider = try files.pki.providerIdentity(bundleID: UpstreamHarness.topic)
            let ca = files.pki.caCertificate
            try await BridgeRuntime.serve(settings, metrics: nil, logger: .forTests()) { running in
                // APNs refuses the token: status 8 for the notification, then the close.
                let refused = try await LegacyConnection.connect(
                    to: running.addresses.gateway,
                    identity: provider,
                    trusting: ca
                )
                try await refused.send(Self.frame(1, token: badToken))
                var answer = try await refused.bytesUntilClose()
                #expect(
                    answer.readErrorResponse()
                        == ErrorResponsePacket(status: .invalidToken, identifier: NotificationIdentifier(rawValue: 1))
                )

                // A provider that sends and stays connected: once its notification reached APNs
                // it is open, and the shutdown's farewell is its to read.
                let staying = try await LegacyConnection.connect(
                    to: running.addresses.gateway,
                    identity: provider,
                    trusting: ca
                )
                try await staying.send(Self.frame(2, token: FrameBuilder.token(2)))
                try await eventually("the second notification to reach the mock") { mock.ledger.accepted.count == 1 }
                await running.shutdown()
                var farewell = try await staying.bytesUntilClose()
                #expect(farewell.readErrorResponse()?.status == .shutdown)
            }
            // serve returned: every service ended and the store is closed.
            #expect(mock.ledger.records.count == 2)
        }
    }

    @Test("serve: a `ready` that throws shuts the bridge down as SIGTERM does, and serve throws its error")
    func readyThrows() async throws {
        struct ReadyFailed: Error {}
        let files = try ConfigurationFiles()
        defer { files.remove() }
        try await withResource(try await Self.mock(files)) { mock in
            let settings = try await Self.settings(files, mock: mock)
            await #expect(throws: ReadyFailed.self) {
                try await BridgeRuntime.serve(settings, metrics: nil, logger: .forTests()) { running in
                    #expect(running.addresses.gateway.port != 0, "every listener is up")
                    #expect(running.addresses.admin?.port != 0)
                    throw ReadyFailed()
                }
            }
        }
    }

    @Test(
        "serve: a listener that cannot bind once the others are up fails its service; the group shuts down what started, ready never runs, serve throws the listener's key"
    )
    func listenerFailsToBind() async throws {
        let files = try ConfigurationFiles()
        defer { files.remove() }
        try await withResource(try await Self.mock(files)) { mock in
            // A port free now, given to both listeners: each passes the probe (it binds and
            // closes), and whichever binds second fails in its service's run(), after the
            // other service has started listening.
            let probe = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .bind(host: "127.0.0.1", port: 0).get()
            let port = try #require(probe.localAddress?.port)
            try await probe.close()
            var settings = try await Self.settings(files, mock: mock)
            settings.gateway.port = port
            settings.feedback.port = port
            let readyRan = Mutex(false)
            let error = await #expect(throws: ConfigurationError.self) {
                try await BridgeRuntime.serve(settings, metrics: nil, logger: .forTests()) { _ in
                    readyRan.withLock { $0 = true }
                }
            }
            #expect(["gateway.listen", "feedback.listen"].contains(error?.key), "\(String(describing: error))")
            #expect(
                error?.message.contains("cannot listen on 127.0.0.1:\(port)") == true,
                "\(String(describing: error))"
            )
            #expect(!readyRan.withLock { $0 })
            // serve returned: the listener that had bound was closed on the way down.
            let again = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .bind(host: "127.0.0.1", port: port).get()
            try await again.close()
        }
    }
}

import ArgumentParser
import BridgeCore
import BridgeServer
import BridgeStores
import BridgeTestSupport
import Crypto
import Foundation
import LegacyProtocol
import Logging
import MockAPNs
import NIOCore
import NIOPosix
import NIOSSL
import UpstreamAPNs

struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Runs the whole path on this machine: legacy client → gateway → HTTP/2 → mock APNs.",
        discussion: """
            Makes a throwaway CA, a provider certificate (UID=com.example.demo) and a signing key; \
            starts the mock APNs server and the gateway on 127.0.0.1; sends notifications through \
            the gateway over TLS with the built-in legacy client, one of them to a token APNs \
            rejects and one to a token APNs calls Unregistered; reads the feedback port like a \
            cron job; prints what happened. The store is SQLite in a temporary folder: needs no \
            Apple account and no database server.
            """
    )

    func run() async throws {
        var logger = Logger(label: "apns-bridge.demo")
        logger.logLevel = .error
        let pki = try TestPKI(name: "apns-bridge demo CA")
        let topic = "com.example.demo"
        let signingKey = P256.Signing.PrivateKey()

        // The upstream: a mock APNs on 127.0.0.1 that knows the demo's signing key.
        var mockConfiguration = MockAPNsConfiguration(certificateChain: [pki.server.certificate], privateKey: pki.server.privateKey)
        mockConfiguration.port = 0
        mockConfiguration.signingKeys = [.init(keyID: "DEMOKEY123", teamID: "DEMOTEAM12", publicKey: signingKey.publicKey)]
        mockConfiguration.topics = [topic]
        let mock = try await MockAPNsServer.start(configuration: mockConfiguration, logger: logger)
        let badToken = FrameBuilder.token(0xBAD)
        let unregisteredToken = FrameBuilder.token(0x410)
        mock.script.rejectAsBadToken(badToken.hexDump(format: .compact))
        mock.script.unregister(token: unregisteredToken.hexDump(format: .compact), atMilliseconds: 1_767_225_600_000)
        print("mock APNs listening on \(mock.localAddress) (TLS, HTTP/2)")

        // The HTTP/2 client, with a provider token signed by the demo key.
        var clientConfiguration = APNsClient.Configuration()
        let endpoint = APNsEndpoint(host: "127.0.0.1", port: mock.port, serverHostname: "localhost", trustRoots: .certificates([pki.caCertificate]))
        clientConfiguration.endpoints = [.sandbox: endpoint, .production: endpoint]
        let tokens = ProviderTokenSource(signer: ProviderTokenSigner(key: signingKey, keyID: "DEMOKEY123", teamID: "DEMOTEAM12"), logger: logger)
        let client = try APNsClient(configuration: clientConfiguration, credentials: .token(tokens), logger: logger)

        // The store: SQLite in a temporary folder.
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("apns-bridge-demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = try await SQLiteBridgeStore.open(path: folder.appendingPathComponent("store.sqlite").path, logger: logger)

        // The legacy gateway and the feedback service.
        let resolver = CertificateSubjectTenantResolver(environment: .sandbox)
        let gateway = try await GatewayServer.start(
            configuration: GatewayConfiguration.loopback(pki: pki),
            upstream: client,
            resendRecords: store,
            feedback: store,
            tenantResolver: resolver,
            logger: logger
        )
        let feedbackServer = try await FeedbackServer.start(
            configuration: FeedbackConfiguration.loopback(pki: pki),
            store: store,
            tenantResolver: resolver,
            logger: logger
        )
        print("gateway listening on \(gateway.localAddress) (TLS 1.2, client certificate required)")
        print("feedback service listening on \(feedbackServer.localAddress); store: SQLite in \(folder.path)")
        print("provider certificate: UID=\(topic), issued by a CA made for this run\n")

        /// Sends frames on a new provider connection and prints what came back.
        func send(_ frames: [(UInt32, ByteBuffer)], note: String, expectFailure: Bool = false, acceptedTotal: Int = 0) async throws {
            let connection = try await LegacyTestClient.connect(
                to: gateway.localAddress,
                identity: try pki.providerIdentity(bundleID: topic),
                trusting: pki.caCertificate
            )
            var bytes = ByteBuffer()
            for (identifier, token) in frames {
                bytes.writeImmutableBuffer(FrameBuilder.frame(.itemized, identifier: identifier, token: token, payload: FrameBuilder.payload()))
            }
            print("→ \(note)")
            try await connection.send(bytes)
            if expectFailure {
                var received = try await connection.bytesUntilClose()
                if let packet = received.readErrorResponse() {
                    print("  ← error-response: status \(packet.status), identifier \(packet.identifier); the gateway closed the connection")
                }
            } else {
                guard await mock.ledger.waitForAccepted(acceptedTotal, timeout: .seconds(10)) else {
                    throw ValidationError("the mock APNs did not receive the notifications")
                }
                print("  ← nothing (accepted); the connection stays open")
                await connection.close()
            }
        }

        try await send(
            [(1, FrameBuilder.token(1)), (2, FrameBuilder.token(2)), (3, unregisteredToken)],
            note: "identifiers 1, 2, 3 (3 goes to a token APNs calls Unregistered)",
            acceptedTotal: 2
        )
        try await send(
            [(4, FrameBuilder.token(4)), (5, badToken), (6, FrameBuilder.token(6))],
            note: "identifiers 4, 5, 6 (5 goes to a token APNs rejects as BadDeviceToken)",
            expectFailure: true
        )
        try await send(
            [(6, FrameBuilder.token(6)), (7, FrameBuilder.token(7))],
            note: "the provider resends 6 on a new connection, then sends 7",
            acceptedTotal: 5
        )

        print("\nwhat the mock APNs received (POST /3/device/<token>, HTTP/2):")
        for record in mock.ledger.records {
            let token = record.token.prefix(8) + "…"
            let answer = record.status == 200 ? "200" : "\(record.status) \(record.reason?.rawValue ?? "")"
            print("  apns-id \(record.apnsID ?? "-")  token \(token)  topic \(record.topic ?? "-")  → \(answer)")
        }
        // The 410's entry is committed in the background: wait for it, then poll like a cron job.
        let deadline = ContinuousClock.now + .seconds(10)
        while try await store.pendingCount() == 0, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        print("\n→ a feedback poller connects to \(feedbackServer.localAddress) with the provider certificate")
        let poll = try await FeedbackTestClient.poll(
            feedbackServer.localAddress,
            identity: try pki.providerIdentity(bundleID: topic),
            trusting: pki.caCertificate
        )
        for tuple in poll.tuples {
            print("  ← feedback tuple: timestamp \(tuple.timestamp), token \(LogRedaction.token(tuple.deviceToken))")
        }
        print("  ← \(poll.cleanClose ? "then a clean close" : "the connection was cut") (\(poll.tupleCount) tuple\(poll.tupleCount == 1 ? "" : "s"))")
        await feedbackServer.close()
        await gateway.close()
        client.shutdown()
        await store.close()
        await mock.close()
        guard poll.tupleCount == 1 else { throw ValidationError("expected one feedback tuple, got \(poll.tupleCount)") }
    }
}

import ArgumentParser
import BridgeApp
import BridgeCore
import BridgeServer
import BridgeStores
import Crypto
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import Logging
import MockAPNs
import NIOCore
import NIOPosix
import NIOSSL
import UpstreamAPNs

struct DemoCommand: AsyncParsableCommand {
    @Flag(
        name: .customLong("keep-running"),
        help: "Leave the bridge and the mock APNs running afterwards, and print how to try them by hand."
    )
    var keepRunning = false

    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Runs the whole path on this machine: legacy client → gateway → HTTP/2 → mock APNs.",
        discussion: """
            Makes a throwaway CA, a provider certificate (UID=com.example.demo) and a signing key; \
            starts the mock APNs server and the gateway on 127.0.0.1; sends notifications through \
            the gateway over TLS with the built-in legacy client, one of them to a token APNs \
            rejects and one to a token APNs calls Unregistered; creates a Live Activity channel \
            over the mock's channel management API and sends a frame to its channel token, which \
            becomes a broadcast; reads the feedback port like a cron job; prints what happened. The store is SQLite in a temporary folder: needs no \
            Apple account and no database server.
            """
    )

    func run() async throws {
        let metrics = BridgeMetrics.bootstrapPrometheus()
        LoggingSystem.bootstrap { BridgeLogHandler(label: $0, format: .text, logLevel: .info) }
        var logger = Logger(label: "apns-bridge.demo")
        logger.logLevel = .error
        let pki = try DevelopmentCA(name: "apns-bridge demo CA")
        let topic = "com.example.demo"
        let signingKey = P256.Signing.PrivateKey()

        // The upstream: a mock APNs on 127.0.0.1 that knows the demo's signing key.
        var mockConfiguration = MockAPNsConfiguration(
            certificateChain: [pki.server.certificate],
            privateKey: pki.server.privateKey
        )
        mockConfiguration.port = 0
        mockConfiguration.signingKeys = [
            .init(keyID: "DEMOKEY123", teamID: "DEMOTEAM12", publicKey: signingKey.publicKey)
        ]
        mockConfiguration.topics = [topic]
        let mock = try await MockAPNsServer.start(configuration: mockConfiguration, logger: logger)
        let badToken = FrameBuilder.token(0xBAD)
        let unregisteredToken = FrameBuilder.token(0x410)
        mock.script.rejectAsBadToken(badToken.hexDump(format: .compact))
        mock.script.unregister(token: unregisteredToken.hexDump(format: .compact), atMilliseconds: 1_767_225_600_000)
        print("mock APNs listening on \(mock.localAddress.hostAndPort) (TLS, HTTP/2)")

        // A Live Activity channel, made over the mock's channel management API as
        // `apns-bridge channels create` makes one at Apple.
        let channels = try APNsChannelManagementClient(
            endpoint: APNsEndpoint(
                host: "127.0.0.1",
                port: mock.port,
                serverHostname: "localhost",
                trustRoots: .certificates([pki.caCertificate])
            ),
            credentials: .token(
                AuthenticationTokenSource(
                    signer: AuthenticationTokenSigner(key: signingKey, keyID: "DEMOKEY123", teamID: "DEMOTEAM12"),
                    logger: logger
                )
            ),
            logger: logger
        )
        let channelID = try await channels.create(bundleID: topic, messageStoragePolicy: .mostRecentMessageStored)
        channels.shutdown()
        let channelToken = ChannelToken.derive(tenant: "demo", channelID: channelID)
        print(
            "channel \(channelID) created for \(topic) (POST /1/apps/\(topic)/channels); its channel token: \(ChannelToken.hex(channelToken))"
        )

        // The bridge itself, as `serve` runs it, configured with the files of this run; the
        // store is SQLite in a temporary folder.
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "apns-bridge-demo-\(UUID().uuidString)"
        )
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { if !self.keepRunning { try? FileManager.default.removeItem(at: folder) } }
        // One provider certificate for every connection of the run, as a provider has: the
        // migration view then lists one certificate for it.
        let provider = try pki.providerIdentity(bundleID: topic)
        let files = try DemoFiles(pki: pki, provider: provider, signingKey: signingKey, in: folder.path)
        let settings = try BridgeSettings.load(
            from: try await SettingsReader(
                flags: [
                    "gateway.listen": "127.0.0.1:0", "feedback.listen": "127.0.0.1:0", "admin.listen": "127.0.0.1:0",
                    "tls.certificate": files.serverCertificate, "tls.privateKey": files.serverKey,
                    "tls.clientCA": files.ca,
                    "environment": "sandbox",
                    "store.url": "sqlite:" + folder.appendingPathComponent("store.sqlite").path,
                    "credentials": "demo", "credential.demo.keyFile": files.signingKey,
                    "credential.demo.keyId": "DEMOKEY123", "credential.demo.teamId": "DEMOTEAM12",
                    "upstream.sandbox": "127.0.0.1:\(mock.port)", "upstream.production": "127.0.0.1:\(mock.port)",
                    "upstream.ca": files.ca, "upstream.serverName": "localhost",
                    "tenants": "demo", "tenant.demo.uid": topic, "tenant.demo.channels": "scores",
                    "tenant.demo.channel.scores.id": channelID,
                ],
                environment: [:],
                file: nil
            )
        )
        // The bridge runs as `serve` runs it; the demo is a client of it: the round trip runs
        // beside the bridge's services once every listener is up. A failure of the round trip
        // shuts the bridge down and is this command's error; without --keep-running the bridge
        // stops as on SIGTERM once the round trip is done, with it, Ctrl-C stops it.
        let keepRunning = self.keepRunning
        do {
            try await BridgeRuntime.serve(settings, metrics: metrics, logger: logger) { running in
                try await DemoRoundTrip(
                    running: running,
                    mock: mock,
                    pki: pki,
                    provider: provider,
                    topic: topic,
                    badToken: badToken,
                    unregisteredToken: unregisteredToken,
                    channelToken: channelToken,
                    folder: folder.path
                ).run()
                if keepRunning {
                    Self.printKeepRunning(
                        running.addresses,
                        files: files,
                        unregisteredToken: unregisteredToken,
                        folder: folder.path
                    )
                } else {
                    await running.shutdown()
                }
            }
        } catch {
            await mock.close()
            throw error
        }
        await mock.close()
    }

    static func printKeepRunning(
        _ addresses: ListeningAddresses,
        files: DemoFiles,
        unregisteredToken: ByteBuffer,
        folder: String
    ) {
        print(
            """

            The bridge keeps running (Ctrl-C stops it). Try it by hand, from this folder's files:
              apns-bridge send --gateway 127.0.0.1:\(addresses.gateway.port ?? 0) \\
                  --certificate \(files.providerCertificate) --private-key \(files.providerKey) \\
                  --ca \(files.ca) --server-name localhost --token \(String(repeating: "ab", count: 32))
              apns-bridge send … --token \(unregisteredToken.hexDump(format: .compact))   (APNs calls it Unregistered)
              apns-bridge feedback --feedback 127.0.0.1:\(addresses.feedback.port ?? 0) \\
                  --certificate \(files.providerCertificate) --private-key \(files.providerKey) \\
                  --ca \(files.ca) --server-name localhost
              curl http://127.0.0.1:\(addresses.admin?.port ?? 0)/metrics
              apns-bridge log --admin 127.0.0.1:\(addresses.admin?.port ?? 0)   (what APNs answered each notification)
              apns-bridge log --store sqlite:\(folder)/store.sqlite   (the failures, copied to the store every 5 s)
              open http://127.0.0.1:\(addresses.admin?.port ?? 0)/ (the status page)
            Files: \(folder) (left in place)
            """
        )
        fflush(nil)  // the instructions reach a pipe or file before the wait
    }
}

/// The demo's round trip, as a legacy provider and a cron job see the bridge: notifications
/// (one rejected, one unregistered, one to a channel token), the resend after the error, then a
/// feedback poll. Throws when something did not happen as it should.
struct DemoRoundTrip: Sendable {
    var running: BridgeRuntime.Running
    var mock: MockAPNsServer
    var pki: DevelopmentCA
    var provider: DevelopmentIdentity
    var topic: String
    var badToken: ByteBuffer
    var unregisteredToken: ByteBuffer
    var channelToken: ByteBuffer
    var folder: String

    func run() async throws {
        let addresses = self.running.addresses
        print("gateway listening on \(addresses.gateway.hostAndPort) (TLS 1.2, client certificate required)")
        print("feedback service listening on \(addresses.feedback.hostAndPort); store: SQLite in \(self.folder)")
        let admin = addresses.admin.map(\.hostAndPort) ?? "off"
        print("admin port (/, /metrics, /healthz, /readyz, /push-log) on \(admin)")
        print("provider certificate: UID=\(self.topic), issued by a CA made for this run\n")

        try await self.send(
            [(1, FrameBuilder.token(1)), (2, FrameBuilder.token(2)), (3, self.unregisteredToken)],
            note: "identifiers 1, 2, 3 (3 goes to a token APNs calls Unregistered)",
            acceptedTotal: 3  // the channel's creation, then 1 and 2
        )
        try await self.send(
            [(4, FrameBuilder.token(4)), (5, self.badToken), (6, FrameBuilder.token(6))],
            note: "identifiers 4, 5, 6 (5 goes to a token APNs rejects as BadDeviceToken)",
            expectFailure: true
        )
        try await self.send(
            [(6, FrameBuilder.token(6)), (7, FrameBuilder.token(7))],
            note: "the provider resends 6 on a new connection, then sends 7",
            acceptedTotal: 6
        )
        try await self.send(
            [(8, self.channelToken)],
            note: "identifier 8 to the channel token (a broadcast to every device subscribed to the channel)",
            acceptedTotal: 7
        )
        self.printLedger()

        // The 410's entry is committed in the background: wait for it, then poll like a cron job.
        let deadline = ContinuousClock.now + .seconds(10)
        while try await self.running.store.pendingCount() == 0, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        print("\n→ a feedback poller connects to \(addresses.feedback.hostAndPort) with the provider certificate")
        let poll = try await FeedbackPoller.poll(
            addresses.feedback,
            tls: self.provider.clientTLSConfiguration(
                trusting: self.pki.caCertificate
            ),
            serverHostname: "localhost"
        )
        for tuple in poll.tuples {
            print("  ← feedback tuple: timestamp \(tuple.timestamp), token \(LogRedaction.token(tuple.deviceToken))")
        }
        print(
            "  ← \(poll.cleanClose ? "then a clean close" : "the connection was cut") (\(poll.tupleCount) tuple\(poll.tupleCount == 1 ? "" : "s"))"
        )
        guard poll.tupleCount == 1 else {
            throw ValidationError("expected one feedback tuple, got \(poll.tupleCount)")
        }
    }

    /// Sends frames on a new provider connection and prints what came back.
    private func send(
        _ frames: [(UInt32, ByteBuffer)],
        note: String,
        expectFailure: Bool = false,
        acceptedTotal: Int = 0
    ) async throws {
        let connection = try await LegacyConnection.connect(
            to: self.running.addresses.gateway,
            tls: self.provider.clientTLSConfiguration(
                trusting: self.pki.caCertificate
            ),
            serverHostname: "localhost"
        )
        var bytes = ByteBuffer()
        for (identifier, token) in frames {
            bytes.writeImmutableBuffer(
                FrameBuilder.frame(.itemized, identifier: identifier, token: token, payload: FrameBuilder.payload())
            )
        }
        print("→ \(note)")
        try await connection.send(bytes)
        if expectFailure {
            var received = try await connection.bytesUntilClose()
            guard let packet = received.readErrorResponse() else {
                throw ValidationError("the gateway closed the connection without an error-response")
            }
            print(
                "  ← error-response: status \(packet.status), identifier \(packet.identifier); the gateway closed the connection"
            )
        } else {
            guard await self.mock.ledger.waitForAccepted(acceptedTotal, timeout: .seconds(10)) else {
                throw ValidationError("the mock APNs did not receive the notifications")
            }
            print("  ← nothing (accepted); the connection stays open")
            // close_notify first, so that the gateway's answer ends the close at once.
            _ = await connection.finish()
        }
    }

    private func printLedger() {
        print("\nwhat the mock APNs received (HTTP/2):")
        for record in self.mock.ledger.records {
            let answer = record.wasAccepted ? "\(record.status)" : "\(record.status) \(record.reason?.rawValue ?? "")"
            switch record.api {
            case .device:
                print(
                    "  POST /3/device/\(record.token.prefix(8))…  apns-id \(record.apnsID ?? "-")  topic \(record.topic ?? "-")  → \(answer)"
                )
            case .broadcast:
                let uniqueID = record.responseHeaders.first { $0.name == "apns-unique-id" }?.value ?? "-"
                print(
                    "  POST \(record.path ?? "-")  apns-channel-id \(record.channelID ?? "-")  apns-push-type \(record.pushType ?? "-")  apns-priority \(record.priority ?? "-")  apns-request-id \(record.requestID ?? "-")  → \(answer), apns-unique-id \(uniqueID)"
                )
            case .channelManagement:
                print("  \(record.method ?? "-") \(record.path ?? "-")  → \(answer)")
            }
        }
    }
}

/// The demo's PKI and signing key as files, as an operator would have them.
struct DemoFiles {
    var ca: String
    var serverCertificate: String
    var serverKey: String
    var providerCertificate: String
    var providerKey: String
    var signingKey: String

    init(
        pki: DevelopmentCA,
        provider: DevelopmentIdentity,
        signingKey: P256.Signing.PrivateKey,
        in folder: String
    )
        throws
    {
        self.ca = folder + "/ca.pem"
        try pki.caCertificatePEM.write(toFile: self.ca, atomically: true, encoding: .utf8)
        (self.serverCertificate, self.serverKey) = try pki.server.writePEMFiles(to: folder, name: "bridge")
        (self.providerCertificate, self.providerKey) = try provider.writePEMFiles(
            to: folder,
            name: "provider"
        )
        self.signingKey = folder + "/AuthKey_DEMOKEY123.p8"
        try signingKey.pemRepresentation.write(toFile: self.signingKey, atomically: true, encoding: .utf8)
    }
}

import ArgumentParser
import BridgeCore
import BridgeServer
import BridgeStores
import Crypto
import Foundation
import Logging
import NIOCore
import NIOSSL
import UpstreamAPNs

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Runs the bridge: the legacy gateway (2195), the feedback service (2196) and the HTTP/2 client.",
        discussion: """
            Tenants come from the client certificate's subject: UID= is the bundle id and the topic. \
            The store keeps feedback lists and resend records: sqlite:PATH for one instance, \
            postgres://user@host/database for several behind a TCP load balancer \
            (docs/scaling.md). A configuration file and per-tenant credentials arrive with the \
            product issue; these flags cover one team's signing key for every tenant.
            """
    )

    @Option(help: "Gateway listener, HOST:PORT (port 0 picks a free port).")
    var gateway = "0.0.0.0:2195"

    @Option(help: "Feedback listener, HOST:PORT.")
    var feedback = "0.0.0.0:2196"

    @Option(help: "PEM certificate (chain) the listeners present.")
    var certificate: String

    @Option(name: .customLong("private-key"), help: "PEM private key of --certificate.")
    var privateKey: String

    @Option(name: .customLong("client-ca"), help: "PEM bundle of the CA(s) provider certificates must chain to.")
    var clientCA: String

    @Option(help: "APNs environment of every tenant: sandbox or production.")
    var environment: String = "production"

    @Option(help: "Where feedback lists and resend records live: sqlite:PATH or postgres://user:password@host:port/database.")
    var store = "sqlite:apns-bridge.sqlite"

    @Option(name: .customLong("signing-key"), help: "KEYID:TEAMID:PATH of the team's .p8 key (JWT provider tokens).")
    var signingKey: String

    @Option(help: "Send to this HOST:PORT instead of Apple's hosts (a staging or mock APNs).")
    var upstream: String?

    @Option(name: .customLong("upstream-ca"), help: "PEM CA certificate(s) to trust for --upstream (default: the system's).")
    var upstreamCA: String?

    @Option(name: .customLong("upstream-server-name"), help: "TLS server name of --upstream (default: its host).")
    var upstreamServerName: String?

    @Flag(name: .customLong("feedback-only-32-byte-tokens"), help: "Leave tokens that are not 32 bytes out of feedback lists (for clients that assume 38-byte tuples).")
    var only32ByteTokens = false

    @Option(name: .customLong("feedback-retention-days"), help: "Feedback entries not polled within this many days are removed.")
    var feedbackRetentionDays = 30

    @Option(name: .customLong("resend-window-seconds"), help: "How long a resend record is kept (CONTRACT §1.6).")
    var resendWindowSeconds = 120

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel = "info"

    func run() async throws {
        guard let level = Logger.Level(rawValue: self.logLevel) else { throw ValidationError("--log-level \(self.logLevel): unknown level") }
        guard let environment = APNsEnvironment(rawValue: self.environment) else {
            throw ValidationError("--environment \(self.environment): expected sandbox or production")
        }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "apns-bridge")
        let (gatewayHost, gatewayPort) = try Self.hostAndPort(self.gateway, option: "--gateway")
        let (feedbackHost, feedbackPort) = try Self.hostAndPort(self.feedback, option: "--feedback")

        let tls = LegacyTLSConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(self.certificate),
            privateKey: try NIOSSLPrivateKey(file: self.privateKey, format: .pem),
            clientCertificateAuthorities: try NIOSSLCertificate.fromPEMFile(self.clientCA)
        )
        var storeConfiguration = BridgeStoreConfiguration()
        storeConfiguration.feedbackRetention = .seconds(self.feedbackRetentionDays * 24 * 3600)
        storeConfiguration.resendRecordWindow = .seconds(self.resendWindowSeconds)
        let store = try await BridgeStoreLocation.open(self.store, configuration: storeConfiguration, logger: logger)
        let maintenance = Task { await BridgeStoreMaintenance.run(store, logger: logger) }

        var clientConfiguration = APNsClient.Configuration()
        if let upstream = self.upstream {
            let (host, port) = try Self.hostAndPort(upstream, option: "--upstream")
            let trustRoots = try self.upstreamCA.map { NIOSSLTrustRoots.certificates(try NIOSSLCertificate.fromPEMFile($0)) }
            let endpoint = APNsEndpoint(host: host, port: port, serverHostname: self.upstreamServerName, trustRoots: trustRoots)
            clientConfiguration.endpoints = [.sandbox: endpoint, .production: endpoint]
        }
        let client = try APNsClient(configuration: clientConfiguration, credentials: .token(try self.providerTokens(logger: logger)), logger: logger)
        let resolver = CertificateSubjectTenantResolver(environment: environment)

        var gatewayConfiguration = GatewayConfiguration(tls: tls)
        gatewayConfiguration.host = gatewayHost
        gatewayConfiguration.port = gatewayPort
        let gatewayServer = try await GatewayServer.start(
            configuration: gatewayConfiguration,
            upstream: client,
            resendRecords: store,
            feedback: store,
            tenantResolver: resolver,
            logger: logger
        )
        var feedbackConfiguration = FeedbackConfiguration(tls: tls)
        feedbackConfiguration.host = feedbackHost
        feedbackConfiguration.port = feedbackPort
        feedbackConfiguration.drain.only32ByteTokens = self.only32ByteTokens
        let feedbackServer = try await FeedbackServer.start(
            configuration: feedbackConfiguration,
            store: store,
            tenantResolver: resolver,
            logger: logger
        )
        // One line on standard output for scripts and tests that start the bridge on port 0.
        FileHandle.standardOutput.write(
            Data("ready gateway=\(gatewayServer.localAddress.port ?? 0) feedback=\(feedbackServer.localAddress.port ?? 0)\n".utf8)
        )

        let signal = await Self.waitForTerminationSignal()
        logger.info("shutting down", metadata: ["signal": "\(signal)"])
        await feedbackServer.close()
        await gatewayServer.shutdownGracefully()
        client.shutdown()
        maintenance.cancel()
        await store.close()
        logger.info("stopped")
    }

    private func providerTokens(logger: Logger) throws -> ProviderTokenSource {
        let parts = self.signingKey.split(separator: ":", maxSplits: 2)
        guard parts.count == 3 else { throw ValidationError("--signing-key \(self.signingKey): expected KEYID:TEAMID:PATH") }
        let key = try P256.Signing.PrivateKey(pemRepresentation: try String(contentsOfFile: String(parts[2]), encoding: .utf8))
        return ProviderTokenSource(signer: ProviderTokenSigner(key: key, keyID: String(parts[0]), teamID: String(parts[1])), logger: logger)
    }

    static func hostAndPort(_ value: String, option: String) throws -> (String, Int) {
        guard let colon = value.lastIndex(of: ":"), let port = Int(value[value.index(after: colon)...]), (0...65535).contains(port) else {
            throw ValidationError("\(option) \(value): expected HOST:PORT")
        }
        var host = String(value[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return (host, port)
    }

    /// Waits for SIGINT or SIGTERM.
    static func waitForTerminationSignal() async -> Int32 {
        let (signals, continuation) = AsyncStream<Int32>.makeStream()
        var sources: [any DispatchSourceSignal] = []
        for signalNumber in [SIGINT, SIGTERM] {
            Foundation.signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber)
            source.setEventHandler { continuation.yield(signalNumber) }
            source.resume()
            sources.append(source)
        }
        var received: Int32 = 0
        for await signalNumber in signals {
            received = signalNumber
            break
        }
        sources.forEach { $0.cancel() }
        return received
    }
}

import BridgeCore
import BridgeServer
import DevelopmentPKI
import LegacyClient
import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// A gateway on 127.0.0.1 (port 0) with a throwaway PKI, a scripted forwarder and in-memory
/// stores: what the integration tests and the fuzzer's replay drive over real TLS.
/// `resendStore` may put a store of the test's own in front of the in-memory one.
package final class GatewayHarness: Sendable {
    package let pki: DevelopmentCA
    package let forwarder: ScriptedForwarder
    package let resendRecords: InMemoryResendRecordStore
    package let feedback: InMemoryFeedbackRecorder
    package let server: GatewayServer

    private init(
        pki: DevelopmentCA,
        forwarder: ScriptedForwarder,
        resendRecords: InMemoryResendRecordStore,
        feedback: InMemoryFeedbackRecorder,
        server: GatewayServer
    ) {
        self.pki = pki
        self.forwarder = forwarder
        self.resendRecords = resendRecords
        self.feedback = feedback
        self.server = server
    }

    package static func start(
        resendStore: (InMemoryResendRecordStore) -> any ResendRecordStore = { $0 },
        script: @escaping ScriptedForwarder.Script = { _, _ in .init(.accepted) },
        environment: APNsEnvironment = .sandbox,
        pki: DevelopmentCA? = nil,
        tenantResolver: (any TenantResolver)? = nil,
        tlsContext: LegacyTLSContext? = nil,
        log: CapturedLog? = nil,
        logLevel: Logger.Level = .warning,
        metrics: GatewayMetrics = GatewayMetrics(),
        configure: (inout GatewayConfiguration) -> Void = { _ in }
    ) async throws -> GatewayHarness {
        let pki = try pki ?? DevelopmentCA()
        var configuration = GatewayConfiguration.loopback(pki: pki)
        configure(&configuration)
        let forwarder = ScriptedForwarder(script: script)
        let resendRecords = InMemoryResendRecordStore()
        let feedback = InMemoryFeedbackRecorder()
        var logger = log?.logger ?? Logger(label: "apns-bridge.test")
        logger.logLevel = logLevel
        let server = try await GatewayServer.start(
            configuration: configuration,
            forwarder: forwarder,
            resendRecords: resendStore(resendRecords),
            feedback: feedback,
            tenantResolver: tenantResolver ?? CertificateSubjectTenantResolver(environment: environment),
            tlsContext: tlsContext,
            metrics: metrics,
            logger: logger
        )
        return GatewayHarness(
            pki: pki,
            forwarder: forwarder,
            resendRecords: resendRecords,
            feedback: feedback,
            server: server
        )
    }

    /// A provider connection with a certificate for `bundleID` (`nil`: a certificate without `UID=`).
    package func connect(
        bundleID: String? = "com.example.app",
        minimumTLSVersion: TLSVersion = .tlsv1,
        maximumTLSVersion: TLSVersion? = .tlsv12
    ) async throws -> LegacyConnection {
        try await LegacyConnection.connect(
            to: self.server.localAddress,
            identity: try self.pki.providerIdentity(bundleID: bundleID),
            trusting: self.pki.caCertificate,
            minimumTLSVersion: minimumTLSVersion,
            maximumTLSVersion: maximumTLSVersion
        )
    }

    package func stop() async {
        await self.server.close()
    }
}

extension GatewayConfiguration {
    /// A gateway on 127.0.0.1 (any free port) with the PKI's server certificate, trusting its
    /// CA for client certificates, and a short drain time.
    package static func loopback(pki: DevelopmentCA) -> GatewayConfiguration {
        var configuration = GatewayConfiguration(
            tls: LegacyTLSConfiguration(
                certificateChain: [pki.server.certificate],
                privateKey: pki.server.privateKey,
                clientCertificateAuthorities: [pki.caCertificate]
            )
        )
        configuration.host = "127.0.0.1"
        configuration.port = 0
        configuration.errorDrainTime = .milliseconds(200)
        configuration.handshakeTimeout = Self.loopbackHandshakeTimeout
        return configuration
    }

    /// A TLS handshake's timeout in tests: a bound on a hang, not on speed. In the first seconds
    /// of a full debug run, when every suite starts at once on 2 cores, a handshake has taken
    /// longer than the product's 10 s. A test of the timeout itself sets its own.
    package static let loopbackHandshakeTimeout: TimeAmount = .seconds(60)
}

extension FeedbackConfiguration {
    /// A feedback listener on 127.0.0.1 (any free port) with the PKI's certificates.
    package static func loopback(pki: DevelopmentCA) -> FeedbackConfiguration {
        var configuration = FeedbackConfiguration(tls: GatewayConfiguration.loopback(pki: pki).tls)
        configuration.host = "127.0.0.1"
        configuration.port = 0
        configuration.handshakeTimeout = GatewayConfiguration.loopbackHandshakeTimeout
        // A bound on a hang, not on speed, as the handshake's: in a full debug run on 2 cores a
        // PostgreSQL claim has taken past the product's 10 s, and the poll was closed with a
        // batch claimed and not delivered (pending again, but not what the test expected).
        configuration.storeTimeout = .seconds(120)
        return configuration
    }
}

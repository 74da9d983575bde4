import DevelopmentPKI
import LegacyClient
import NIOCore
import NIOPosix
import NIOSSL

// The legacy clients with a development identity: what the tests' providers and pollers use.

extension LegacyConnection {
    /// Connects with a development identity (none: no client certificate), trusting `ca`.
    package static func connect(
        to address: SocketAddress,
        identity: DevelopmentIdentity?,
        trusting ca: NIOSSLCertificate,
        minimumTLSVersion: TLSVersion = .tlsv1,
        maximumTLSVersion: TLSVersion? = .tlsv12,
        from localAddress: SocketAddress? = nil,
        preamble: ByteBuffer? = nil,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> LegacyConnection {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates([ca])
        tls.minimumTLSVersion = minimumTLSVersion
        tls.maximumTLSVersion = maximumTLSVersion
        if let identity {
            tls.certificateChain = [.certificate(identity.certificate)]
            tls.privateKey = .privateKey(identity.privateKey)
        }
        return try await Self.connect(
            to: address,
            tls: tls,
            serverHostname: "localhost",
            from: localAddress,
            preamble: preamble,
            group: group
        )
    }
}

extension FeedbackPoller {
    /// Polls once. `closeAfterBytes` makes the poller hang up by itself after reading that many
    /// bytes, like a client that dies midway.
    package static func poll(
        _ address: SocketAddress,
        identity: DevelopmentIdentity,
        trusting ca: NIOSSLCertificate,
        keepTuples: Bool = true,
        closeAfterBytes: Int? = nil,
        timeout: TimeAmount = .seconds(60),
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> Poll {
        try await Self.poll(
            address,
            tls: identity.clientTLSConfiguration(trusting: ca),
            serverHostname: "localhost",
            keepTuples: keepTuples,
            closeAfterBytes: closeAfterBytes,
            timeout: timeout,
            group: group
        )
    }
}

import BridgeCore
import NIOCore
import NIOSSL

extension UsageRecorder {
    /// A handshake completed on one of the legacy listeners: the TLS version and source address
    /// of the connection (the client's, behind a load balancer that sends a PROXY header), and
    /// the provider certificate, go to the migration view.
    func connected(
        tenant: String,
        context: ChannelHandlerContext,
        address: SocketAddress?,
        certificate: NIOSSLCertificate?,
        feedback: Bool
    ) {
        let handler = try? context.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self)
        self.connected(
            tenant: tenant,
            tlsVersion: handler?.tlsVersion.map(Self.name),
            address: address?.ipAddress,
            certificate: certificate.flatMap { try? ProviderCertificate($0).seen },
            feedback: feedback
        )
    }

    static func name(_ version: TLSVersion) -> String {
        switch version {
        case .tlsv1: "TLSv1.0"
        case .tlsv11: "TLSv1.1"
        case .tlsv12: "TLSv1.2"
        case .tlsv13: "TLSv1.3"
        }
    }
}

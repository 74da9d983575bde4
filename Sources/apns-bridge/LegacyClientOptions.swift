import ArgumentParser
import BridgeApp
import Foundation
import NIOCore
import NIOSSL

/// How the `send` and `feedback` commands reach a legacy port, as a provider would.
struct LegacyClientOptions: ParsableArguments {
    @Option(name: .customLong("certificate"), help: "PEM provider (client) certificate.")
    var certificate: String

    @Option(name: .customLong("private-key"), help: "PEM private key of --certificate.")
    var privateKey: String

    @Option(
        name: .customLong("ca"),
        help: "PEM CA certificate(s) that issued the bridge's certificate (default: the system's)."
    )
    var ca: String?

    @Option(
        name: .customLong("server-name"),
        help: "TLS server name to check the bridge's certificate against (default: the host, if not an IP address)."
    )
    var serverName: String?

    func tlsConfiguration() throws -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.maximumTLSVersion = .tlsv12
        tls.certificateChain = try NIOSSLCertificate.fromPEMFile(self.certificate).map { .certificate($0) }
        tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: self.privateKey, format: .pem))
        if let ca {
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(ca))
        }
        return tls
    }

    static func resolve(_ address: String, option: String) throws -> (SocketAddress, String?) {
        guard let (host, port) = SettingsReader.parseAddress(address) else {
            throw ValidationError("\(option) \(address): expected HOST:PORT")
        }
        let socketAddress = try SocketAddress.makeAddressResolvingHost(host, port: port)
        let isIP = (try? SocketAddress(ipAddress: host, port: port)) != nil
        return (socketAddress, isIP ? nil : host)
    }
}

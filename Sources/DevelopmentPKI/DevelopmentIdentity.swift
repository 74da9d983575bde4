import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// A certificate and its private key, ready for NIOSSL.
package struct DevelopmentIdentity: Sendable {
    package var certificate: NIOSSLCertificate
    package var privateKey: NIOSSLPrivateKey
    /// The same certificate and key as PEM, for tools that read files (nghttpd, staging).
    package var certificatePEM: String
    package var privateKeyPEM: String

    /// A TLS client configuration presenting this identity and trusting `ca`, at most TLS 1.2
    /// as the legacy interface's clients: a provider's or a feedback poller's.
    package func clientTLSConfiguration(trusting ca: NIOSSLCertificate) -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates([ca])
        tls.maximumTLSVersion = .tlsv12
        tls.certificateChain = [.certificate(self.certificate)]
        tls.privateKey = .privateKey(self.privateKey)
        return tls
    }

    /// Writes `<name>.crt` and `<name>.key` into `directory`; returns their paths.
    package func writePEMFiles(to directory: String, name: String) throws -> (certificate: String, privateKey: String) {
        let certificatePath = directory + "/" + name + ".crt"
        let keyPath = directory + "/" + name + ".key"
        try self.certificatePEM.write(toFile: certificatePath, atomically: true, encoding: .utf8)
        try self.privateKeyPEM.write(toFile: keyPath, atomically: true, encoding: .utf8)
        return (certificatePath, keyPath)
    }
}

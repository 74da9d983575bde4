import Crypto
import DevelopmentPKI
import Foundation

/// A folder with the files a configuration points at: TLS, a client CA, a signing key (the
/// configuration tests' and the channel configuration tests').
package struct ConfigurationFiles {
    package var directory: String
    package var pki: DevelopmentCA

    package init() throws {
        self.directory =
            FileManager.default.temporaryDirectory.appendingPathComponent("apns-bridge-config-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: self.directory, withIntermediateDirectories: true)
        self.pki = try DevelopmentCA()
        _ = try self.pki.server.writePEMFiles(to: self.directory, name: "gateway")
        try self.pki.caCertificatePEM.write(
            toFile: self.directory + "/provider-ca.pem",
            atomically: true,
            encoding: .utf8
        )
        try P256.Signing.PrivateKey().pemRepresentation.write(
            toFile: self.directory + "/AuthKey.p8",
            atomically: true,
            encoding: .utf8
        )
    }

    /// The settings every test needs, as flags.
    package var basics: [String: String] {
        [
            "tls.certificate": self.directory + "/gateway.crt", "tls.privateKey": self.directory + "/gateway.key",
            "tls.clientCA": self.directory + "/provider-ca.pem", "credentials": "main",
            "credential.main.keyFile": self.directory + "/AuthKey.p8", "credential.main.keyId": "KEY1234567",
            "credential.main.teamId": "TEAM123456",
        ]
    }

    package func write(_ yaml: String, name: String = "apns-bridge.yaml") throws -> String {
        let path = self.directory + "/" + name
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    package func remove() { try? FileManager.default.removeItem(atPath: self.directory) }
}

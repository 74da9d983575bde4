import NIOSSL

/// How the provider proves who it is to APNs: a authentication token (JWT) signed with a `.p8` key, or
/// a client certificate.
public enum APNsCredentials: Sendable {
    case token(AuthenticationTokenSource)
    case certificate(chain: [NIOSSLCertificate], privateKey: NIOSSLPrivateKey)

    /// Loads a certificate and key from PEM files.
    public static func certificate(pemCertificateFile: String, pemKeyFile: String) throws -> APNsCredentials {
        .certificate(
            chain: try NIOSSLCertificate.fromPEMFile(pemCertificateFile),
            privateKey: try NIOSSLPrivateKey(file: pemKeyFile, format: .pem)
        )
    }

    /// Loads a certificate and key from a PKCS#12 (`.p12`) file.
    public static func certificate(pkcs12File: String, passphrase: String?) throws -> APNsCredentials {
        let bundle = try NIOSSLPKCS12Bundle(file: pkcs12File, passphrase: passphrase.map { Array($0.utf8) })
        return .certificate(chain: bundle.certificateChain, privateKey: bundle.privateKey)
    }

    public var usesAuthenticationTokens: Bool {
        if case .token = self { return true }
        return false
    }
}

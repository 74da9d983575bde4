import BridgeForwarding
import Crypto
import Foundation
import Logging
import NIOSSL
import UpstreamAPNs

/// Upstream credentials: `credentials`, `defaultCredentials` and each `credential.NAME.*`, checked
/// (keys parse, a key is its certificate's) and opened only when the bridge starts its clients.
extension BridgeSettings {
    static func readCredentials(
        _ settings: SettingsReader
    ) throws -> (credentials: [String: CredentialSource], defaultName: String) {
        let names = try settings.names(.credentials)
        var credentials: [String: CredentialSource] = [:]
        for name in names {
            credentials[name] = try Self.loadCredential(name, settings)
        }
        guard !credentials.isEmpty else {
            throw ConfigurationError(
                key: ConfigurationKey.credentials.name,
                "no upstream credentials: list at least one (a .p8 signing key, or a certificate)"
            )
        }
        let defaultName = settings.string(.defaultCredentials) ?? names[0]
        guard credentials[defaultName] != nil else {
            throw ConfigurationError(
                key: ConfigurationKey.defaultCredentials.name,
                "\"\(defaultName)\" is not listed in credentials"
            )
        }
        return (credentials, defaultName)
    }

    private static func loadCredential(_ name: String, _ settings: SettingsReader) throws -> CredentialSource {
        func key(_ key: ConfigurationKey) -> ConfigurationKey { key.named(name) }
        if let keyFile = try settings.file(key(.credentialKeyFile)) {
            guard let keyID = settings.string(key(.credentialKeyID)) else {
                throw ConfigurationError(
                    key: key(.credentialKeyID).name,
                    "missing: the key id of \(keyFile) (10 characters, from the Apple developer account)"
                )
            }
            guard Self.isAppleIdentifier(keyID) else {
                throw ConfigurationError(
                    key: key(.credentialKeyID).name,
                    "\"\(keyID)\" is not a key id: 10 letters and digits, as the Apple developer account shows it (the AuthKey_KEYID.p8 file name)"
                )
            }
            guard let teamID = settings.string(key(.credentialTeamID)) else {
                throw ConfigurationError(key: key(.credentialTeamID).name, "missing: the team id that owns \(keyFile)")
            }
            guard Self.isAppleIdentifier(teamID) else {
                throw ConfigurationError(
                    key: key(.credentialTeamID).name,
                    "\"\(teamID)\" is not a team id: 10 letters and digits"
                )
            }
            do {
                _ = try P256.Signing.PrivateKey(pemRepresentation: try String(contentsOfFile: keyFile, encoding: .utf8))
            } catch {
                throw ConfigurationError(
                    key: key(.credentialKeyFile).name,
                    "\(keyFile) is not a PEM (.p8) P-256 private key"
                )
            }
            return .signingKey(keyFile: keyFile, keyID: keyID, teamID: teamID)
        }
        if let certificate = try settings.file(key(.credentialCertificate)) {
            let keyPath = try settings.requiredFile(
                key(.credentialPrivateKey),
                why: "the PEM private key of \(certificate)"
            )
            let credentials: APNsCredentials
            do {
                credentials = try APNsCredentials.certificate(pemCertificateFile: certificate, pemKeyFile: keyPath)
            } catch {
                throw ConfigurationError(
                    key: key(.credentialCertificate).name,
                    "\(certificate) and \(keyPath) are not a PEM certificate and key: \(error)"
                )
            }
            guard Self.keyMatchesCertificate(credentials) else {
                throw ConfigurationError(
                    key: key(.credentialPrivateKey).name,
                    "\(keyPath) is not the private key of \(certificate)"
                )
            }
            return .certificate(certificateFile: certificate, privateKeyFile: keyPath)
        }
        if let file = try settings.file(key(.credentialPKCS12)) {
            let passphrase = settings.string(key(.credentialPKCS12Password), secret: true)
            let credentials: APNsCredentials
            do {
                credentials = try APNsCredentials.certificate(pkcs12File: file, passphrase: passphrase)
            } catch {
                throw ConfigurationError(
                    key: key(.credentialPKCS12).name,
                    "\(file) cannot be opened (wrong pkcs12Password, or not PKCS#12)"
                )
            }
            guard Self.keyMatchesCertificate(credentials) else {
                throw ConfigurationError(
                    key: key(.credentialPKCS12).name,
                    "the private key in \(file) is not its certificate's"
                )
            }
            return .pkcs12(file: file, passphrase: passphrase)
        }
        throw ConfigurationError(
            key: key(.credentialKeyFile).name,
            "credentials \(name) need keyFile + keyId + teamId, certificate + privateKey, or pkcs12"
        )
    }

    /// Apple's key and team ids: 10 ASCII letters and digits.
    static func isAppleIdentifier(_ text: String) -> Bool {
        text.count == 10 && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) }
    }

    /// Whether a client TLS context can be made from the certificate and key, as the upstream
    /// client will at start (BoringSSL refuses a key that is not the certificate's).
    static func keyMatchesCertificate(_ credentials: APNsCredentials) -> Bool {
        guard case .certificate(let chain, let key) = credentials else { return true }
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateChain = chain.map { .certificate($0) }
        tls.privateKey = .privateKey(key)
        return (try? NIOSSLContext(configuration: tls)) != nil
    }

    /// Opens the credentials: signing keys become authentication-token sources (one per key, shared by
    /// its connections).
    package func makeCredentials(logger: Logger) throws -> [String: APNsCredentials] {
        try self.credentials.mapValues { source in
            switch source {
            case .signingKey(let keyFile, let keyID, let teamID):
                let key = try P256.Signing.PrivateKey(
                    pemRepresentation: try String(contentsOfFile: keyFile, encoding: .utf8)
                )
                return .token(
                    AuthenticationTokenSource(
                        signer: AuthenticationTokenSigner(key: key, keyID: keyID, teamID: teamID),
                        logger: logger
                    )
                )
            case .certificate(let certificate, let key):
                return try .certificate(pemCertificateFile: certificate, pemKeyFile: key)
            case .pkcs12(let file, let passphrase):
                return try .certificate(pkcs12File: file, passphrase: passphrase)
            }
        }
    }
}

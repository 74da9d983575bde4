import Foundation

/// A provider certificate seen at a handshake.
public struct SeenCertificate: Hashable, Sendable {
    /// Lowercase hex SHA-256 of the certificate.
    public var fingerprint: String
    /// The subject as a distinguished name (`UID=com.example.app, CN=…`).
    public var subject: String
    /// UNIX seconds.
    public var notAfter: Int64

    public init(fingerprint: String, subject: String, notAfter: Int64) {
        self.fingerprint = fingerprint
        self.subject = subject
        self.notAfter = notAfter
    }
}

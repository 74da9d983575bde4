import BridgeCore
import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// What a provider (client) certificate says about its app, as Apple issued them (docs/configuration.md#tenants):
/// the subject's `UID=` (bundle id) and `OU=` (team id), the environment markers and the topics
/// extension, and the certificate's SHA-256 fingerprint.
package struct ProviderCertificate: Hashable, Sendable {
    /// OID 0.9.2342.19200300.100.1.1, `UID` in a distinguished name.
    package static let userIDAttribute: ASN1ObjectIdentifier = [0, 9, 2342, 19_200_300, 100, 1, 1]
    /// Present on certificates that may push to the sandbox (development) environment.
    package static let sandboxMarker: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 3, 1]
    /// Present on certificates that may push to the production environment.
    package static let productionMarker: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 3, 2]
    /// The topics a certificate may push to: a SEQUENCE of UTF8String topics, each followed by a
    /// SEQUENCE describing it.
    package static let topicsExtension: ASN1ObjectIdentifier = [1, 2, 840, 113_635, 100, 6, 3, 6]

    /// Lowercase hex of the SHA-256 of the DER encoding (what `openssl x509 -fingerprint -sha256`
    /// prints, without the colons).
    package var fingerprint: String
    package var userID: String?
    package var organizationalUnit: String?
    package var commonName: String?
    package var hasSandboxMarker: Bool
    package var hasProductionMarker: Bool
    /// Topics from extension `1.2.840.113635.100.6.3.6`, in the certificate's order.
    package var topics: [String]
    /// The subject as a distinguished name, for the migration view.
    package var subject: String
    package var notValidAfter: Date

    package init(derBytes: [UInt8]) throws {
        let certificate = try Certificate(derEncoded: derBytes)
        self.fingerprint = SHA256.hash(data: derBytes).map { String(format: "%02x", $0) }.joined()
        var userID: String?
        var organizationalUnit: String?
        var commonName: String?
        for rdn in certificate.subject {
            for attribute in rdn {
                switch attribute.type {
                case Self.userIDAttribute: userID = String(attribute.value)
                case .RDNAttributeType.organizationalUnitName: organizationalUnit = String(attribute.value)
                case .RDNAttributeType.commonName: commonName = String(attribute.value)
                default: break
                }
            }
        }
        self.userID = userID
        self.organizationalUnit = organizationalUnit
        self.commonName = commonName
        self.hasSandboxMarker = certificate.extensions[oid: Self.sandboxMarker] != nil
        self.hasProductionMarker = certificate.extensions[oid: Self.productionMarker] != nil
        self.topics = certificate.extensions[oid: Self.topicsExtension].map { Self.topics(in: $0.value) } ?? []
        // swift-certificates prints RFC 4514 with the UID attribute as its OID.
        self.subject = String(describing: certificate.subject).replacingOccurrences(
            of: "0.9.2342.19200300.100.1.1=",
            with: "UID="
        )
        self.notValidAfter = certificate.notValidAfter
    }

    /// What the migration view keeps of it.
    package var seen: SeenCertificate {
        SeenCertificate(
            fingerprint: self.fingerprint,
            subject: self.subject,
            notAfter: Int64(self.notValidAfter.timeIntervalSince1970)
        )
    }

    package init(_ certificate: NIOSSLCertificate) throws {
        try self.init(derBytes: try certificate.toDERBytes())
    }

    /// The environment the markers name: only the sandbox marker → sandbox, only the production
    /// marker → production; both (a universal certificate) or neither → `nil`.
    package var markedEnvironment: APNsEnvironment? {
        switch (self.hasSandboxMarker, self.hasProductionMarker) {
        case (true, false): .sandbox
        case (false, true): .production
        default: nil
        }
    }

    /// The UTF8String elements at the top level of the topics extension's SEQUENCE; the
    /// descriptions (nested SEQUENCEs) and anything unreadable are skipped.
    static func topics(in extensionValue: ArraySlice<UInt8>) -> [String] {
        guard let root = try? DER.parse(extensionValue), case .constructed(let nodes) = root.content else { return [] }
        var topics: [String] = []
        for node in nodes where node.identifier == .utf8String {
            if let topic = try? ASN1UTF8String(derEncoded: node) {
                topics.append(String(topic))
            }
        }
        return topics
    }
}

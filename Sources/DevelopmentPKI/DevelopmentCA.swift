import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// A throwaway certificate authority made in-process with swift-certificates: a CA, a server
/// certificate for 127.0.0.1 / ::1 / localhost, and provider (client) certificates shaped like
/// Apple's (subject `UID=<bundle id>`, `OU=<team id>`).
package struct DevelopmentCA: Sendable {
    /// OID 0.9.2342.19200300.100.1.1, `UID` in a distinguished name.
    static let userIDAttribute: ASN1ObjectIdentifier = [0, 9, 2342, 19_200_300, 100, 1, 1]

    package let caCertificate: NIOSSLCertificate
    package let caCertificatePEM: String
    package let server: DevelopmentIdentity
    private let caKey: P256.Signing.PrivateKey
    private let caName: DistinguishedName

    package init(name: String = "apns-bridge test CA") throws {
        let caKey = P256.Signing.PrivateKey()
        let caName = try DistinguishedName { CommonName(name) }
        let now = Date()
        let ca = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: Certificate.PublicKey(caKey.publicKey),
            notValidBefore: now - 3600,
            notValidAfter: now + 86_400 * 365,
            issuer: caName,
            subject: caName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: Certificate.PrivateKey(caKey)
        )
        self.caKey = caKey
        self.caName = caName
        self.caCertificate = try Self.nioCertificate(ca)
        self.caCertificatePEM = try ca.serializeAsPEM().pemString
        self.server = try Self.issue(
            subject: try DistinguishedName { CommonName("localhost") },
            extendedKeyUsage: .serverAuth,
            subjectAlternativeNames: [
                .dnsName("localhost"),
                .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])),
                .ipAddress(ASN1OctetString(contentBytes: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])),
            ],
            caKey: caKey,
            caName: caName
        )
    }

    /// A provider certificate. With `bundleID`, its subject carries `UID=<bundleID>` as Apple's
    /// did; without, only a common name (a tenant with no topic). `sandboxMarker` and
    /// `productionMarker` add Apple's environment extensions (`1.2.840.113635.100.6.3.1` and
    /// `…6.3.2`); `topics` adds the topics extension (`…6.3.6`) in Apple's layout.
    package func providerIdentity(
        bundleID: String?,
        teamID: String = "TEAM123456",
        commonName: String? = nil,
        sandboxMarker: Bool = false,
        productionMarker: Bool = false,
        topics: [String] = []
    ) throws -> DevelopmentIdentity {
        var rdns: [RelativeDistinguishedName] = []
        if let bundleID {
            rdns.append(RelativeDistinguishedName(.init(type: Self.userIDAttribute, utf8String: bundleID)))
        }
        rdns.append(
            RelativeDistinguishedName(
                .init(
                    type: .RDNAttributeType.commonName,
                    utf8String: commonName ?? "Apple Push Services: \(bundleID ?? "none")"
                )
            )
        )
        rdns.append(
            RelativeDistinguishedName(.init(type: .RDNAttributeType.organizationalUnitName, utf8String: teamID))
        )
        var appleExtensions: [Certificate.Extension] = []
        // Apple's markers carry an ASN.1 NULL.
        if sandboxMarker {
            appleExtensions.append(
                Certificate.Extension(oid: [1, 2, 840, 113_635, 100, 6, 3, 1], critical: false, value: [0x05, 0x00])
            )
        }
        if productionMarker {
            appleExtensions.append(
                Certificate.Extension(oid: [1, 2, 840, 113_635, 100, 6, 3, 2], critical: false, value: [0x05, 0x00])
            )
        }
        if !topics.isEmpty {
            appleExtensions.append(
                Certificate.Extension(
                    oid: [1, 2, 840, 113_635, 100, 6, 3, 6],
                    critical: false,
                    value: try Self.topicsExtensionValue(topics)[...]
                )
            )
        }
        return try Self.issue(
            subject: DistinguishedName(rdns),
            extendedKeyUsage: .clientAuth,
            subjectAlternativeNames: [],
            extraExtensions: appleExtensions,
            caKey: self.caKey,
            caName: self.caName
        )
    }

    /// Apple's layout: SEQUENCE { UTF8String topic, SEQUENCE { UTF8String kind }, … }.
    static func topicsExtensionValue(_ topics: [String]) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.appendConstructedNode(identifier: .sequence) { sequence in
            for topic in topics {
                try sequence.serialize(ASN1UTF8String(topic))
                try sequence.appendConstructedNode(identifier: .sequence) { description in
                    try description.serialize(ASN1UTF8String(topic.hasSuffix(".voip") ? "voip" : "app"))
                }
            }
        }
        return serializer.serializedBytes
    }

    private static func issue(
        subject: DistinguishedName,
        extendedKeyUsage: ExtendedKeyUsage.Usage,
        subjectAlternativeNames: [GeneralName],
        extraExtensions: [Certificate.Extension] = [],
        caKey: P256.Signing.PrivateKey,
        caName: DistinguishedName
    ) throws -> DevelopmentIdentity {
        let key = P256.Signing.PrivateKey()
        let now = Date()
        var extensions = try Certificate.Extensions {
            Critical(BasicConstraints.notCertificateAuthority)
            Critical(KeyUsage(digitalSignature: true))
            try ExtendedKeyUsage([extendedKeyUsage])
            if !subjectAlternativeNames.isEmpty {
                SubjectAlternativeNames(subjectAlternativeNames)
            }
        }
        for extraExtension in extraExtensions {
            try extensions.append(extraExtension)
        }
        let certificate = try Certificate(
            version: .v3,
            serialNumber: Certificate.SerialNumber(),
            publicKey: Certificate.PublicKey(key.publicKey),
            notValidBefore: now - 3600,
            notValidAfter: now + 86_400 * 30,
            issuer: caName,
            subject: subject,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: extensions,
            issuerPrivateKey: Certificate.PrivateKey(caKey)
        )
        return DevelopmentIdentity(
            certificate: try self.nioCertificate(certificate),
            privateKey: try NIOSSLPrivateKey(bytes: Array(key.pemRepresentation.utf8), format: .pem),
            certificatePEM: try certificate.serializeAsPEM().pemString,
            privateKeyPEM: key.pemRepresentation
        )
    }

    private static func nioCertificate(_ certificate: Certificate) throws -> NIOSSLCertificate {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return try NIOSSLCertificate(bytes: serializer.serializedBytes, format: .der)
    }
}

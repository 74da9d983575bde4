import BridgeCore
import BridgeServer
import NIOSSL
import SwiftASN1
import X509

/// The subject's `UID=` (the bundle id on Apple-issued provider certificates) names the tenant
/// and is its topic; without a `UID=`, the tenant is named by the common name and has no topic,
/// so its notifications are answered with status 3.
package struct CertificateSubjectTenantResolver: TenantResolver {
    /// OID 0.9.2342.19200300.100.1.1, `UID` in a distinguished name.
    static let userIDAttribute: ASN1ObjectIdentifier = [0, 9, 2342, 19_200_300, 100, 1, 1]

    package var environment: APNsEnvironment

    package init(environment: APNsEnvironment) {
        self.environment = environment
    }

    package func tenant(for certificate: NIOSSLCertificate) -> Tenant? {
        guard let parsed = try? Certificate(derEncoded: certificate.toDERBytes()) else { return nil }
        var userID: String?
        var commonName: String?
        for rdn in parsed.subject {
            for attribute in rdn {
                if attribute.type == Self.userIDAttribute {
                    userID = String(attribute.value)
                } else if attribute.type == .RDNAttributeType.commonName {
                    commonName = String(attribute.value)
                }
            }
        }
        if let userID, !Tenant.isValidTopic(userID) { return nil }  // it would become the apns-topic
        guard let name = userID ?? commonName else { return nil }
        return Tenant(name: name, topic: userID, environment: self.environment)
    }
}

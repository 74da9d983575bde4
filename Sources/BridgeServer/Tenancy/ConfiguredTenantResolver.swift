import BridgeCore
import NIOSSL

/// Resolves tenants from the configuration and the certificate (docs/configuration.md#tenants).
///
/// A certificate matches a rule by fingerprint first, then by `UID=`. Configuration overrides
/// the certificate: the topic is the rule's, else the certificate's `UID=`; the environment is
/// the rule's, else the one the certificate's markers name (only `…6.3.1` → sandbox, only
/// `…6.3.2` → production), else ``defaultEnvironment``. A certificate that matches no rule is a
/// tenant of its own, named by its `UID=`, only while ``acceptsUnlistedCertificates`` is on
/// (the default when no tenant is configured); otherwise it is refused. A tenant whose topic
/// would come from a `UID=` that is not a valid topic (``Tenant/isValidTopic(_:)``) is refused:
/// that value would become the `apns-topic` of requests on connections other tenants share.
package struct ConfiguredTenantResolver: TenantResolver {
    package var rules: [TenantRule]
    package var defaultEnvironment: APNsEnvironment
    package var acceptsUnlistedCertificates: Bool

    package init(rules: [TenantRule], defaultEnvironment: APNsEnvironment, acceptsUnlistedCertificates: Bool? = nil) {
        self.rules = rules
        self.defaultEnvironment = defaultEnvironment
        self.acceptsUnlistedCertificates = acceptsUnlistedCertificates ?? rules.isEmpty
    }

    /// The tenants' fingerprints: trusted by themselves (see ``TenantRule/fingerprints``).
    package var pinnedFingerprints: Set<String> {
        self.rules.reduce(into: []) { $0.formUnion($1.fingerprints) }
    }

    package func tenant(for certificate: NIOSSLCertificate) -> Tenant? {
        guard let parsed = try? ProviderCertificate(certificate) else { return nil }
        return self.tenant(for: parsed)
    }

    package func tenant(for certificate: ProviderCertificate) -> Tenant? {
        let rule =
            self.rules.first { $0.fingerprints.contains(certificate.fingerprint) }
            ?? certificate.userID.flatMap { userID in self.rules.first { $0.userID == userID } }
        if let rule {
            if rule.topic == nil, let userID = certificate.userID, !Tenant.isValidTopic(userID) { return nil }
            return Tenant(
                name: rule.name,
                topic: rule.topic ?? certificate.userID,
                environment: rule.environment ?? certificate.markedEnvironment ?? self.defaultEnvironment,
                credentials: rule.credentials,
                certificateTopics: certificate.topics,
                channels: rule.channels,
                closing: rule.closing
            )
        }
        guard self.acceptsUnlistedCertificates, let userID = certificate.userID, Tenant.isValidTopic(userID) else {
            return nil
        }
        return Tenant(
            name: userID,
            topic: userID,
            environment: certificate.markedEnvironment ?? self.defaultEnvironment,
            certificateTopics: certificate.topics
        )
    }
}

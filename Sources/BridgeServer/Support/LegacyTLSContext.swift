import BridgeCore
import Foundation
import Logging
import NIOCore
import NIOSSL
import SwiftASN1
import Synchronization
import X509

/// The TLS of the legacy listeners: the server context and the check of client certificates,
/// replaceable while the listeners run (new handshakes use the replacement; open connections
/// keep theirs).
///
/// The check runs during the handshake (docs/protocol.md#tls, docs/configuration.md#tenants): a certificate is trusted when its
/// SHA-256 fingerprint is pinned, or when it chains to one of the client CAs (RFC 5280, at the
/// time of the handshake); and it must resolve to a tenant. Otherwise the handshake fails.
///
/// Resumed TLS sessions are served (Java's JSSE and .NET resume on every reconnect): BoringSSL
/// does not call the check for them, so ``ProviderHandshakeHandler`` asks
/// ``ClientCertificateVerifier/verifyResumed(_:)`` once the handshake completed. A session can
/// only be resumed within the server context that made it (the session cache and the ticket
/// keys belong to the context), and every reload replaces the context, so a session made before
/// a reload is never resumed after it (docs/protocol.md, "Resumed TLS sessions").
package final class LegacyTLSContext: Sendable {
    private struct Current: Sendable {
        var sslContext: NIOSSLContext
        var verifier: ClientCertificateVerifier
        var closeNotifyWait: TimeAmount
    }

    private let current: Mutex<Current>
    private let tenantResolver: any TenantResolver
    private let logger: Logger

    package init(configuration: LegacyTLSConfiguration, tenantResolver: any TenantResolver, logger: Logger) throws {
        self.tenantResolver = tenantResolver
        self.logger = logger
        self.current = Mutex(try Self.make(configuration, tenantResolver: tenantResolver))
    }

    /// How long a close waits for the client's close_notify (`tls.closeNotifyWaitSeconds`, as
    /// last loaded), where the connection's tenant has no wait of its own
    /// (docs/protocol.md#closing).
    package var closeNotifyWait: TimeAmount {
        self.current.withLock { $0.closeNotifyWait }
    }

    /// Uses `configuration` for the handshakes that start from now on, and for the closes.
    package func reload(_ configuration: LegacyTLSConfiguration) throws {
        let next = try Self.make(configuration, tenantResolver: self.tenantResolver)
        self.current.withLock { $0 = next }
    }

    private static func make(
        _ configuration: LegacyTLSConfiguration,
        tenantResolver: any TenantResolver
    ) throws -> Current {
        let roots = try configuration.clientCertificateAuthorities.map {
            try Certificate(derEncoded: try $0.toDERBytes())
        }
        return Current(
            sslContext: try configuration.makeServerContext(),
            verifier: ClientCertificateVerifier(
                roots: roots,
                pinnedFingerprints: configuration.pinnedFingerprints.union(tenantResolver.pinnedFingerprints),
                tenantResolver: tenantResolver,
                trustedLeaves: TrustedLeaves()
            ),
            closeNotifyWait: configuration.closeNotifyWait
        )
    }

    /// A TLS handler for one new connection; what the verifier accepts (the tenant and the
    /// certificate) goes into `peer` before the handshake completes. The check (swift-certificates'
    /// verifier is async) runs as one of the listener's `tasks`; a listener that is closing
    /// refuses the handshake.
    func makeServerHandler(
        peer: VerifiedPeer,
        tasks: ConnectionTasks,
        refusals: RefusalLog,
        remoteAddress address: SocketAddress?
    ) -> NIOSSLServerHandler {
        let current = self.current.withLock { $0 }
        let verifier = current.verifier
        peer.use(verifier)
        return NIOSSLServerHandler(context: current.sslContext) { chain, promise in
            let started = tasks.start {
                switch await verifier.verify(chain) {
                case .trusted(let verified):
                    peer.record(verified)
                    promise.succeed(.certificateVerified)
                case .refused(let why):
                    refusals.certificateRefused(why, peer: address)
                    promise.succeed(.failed)
                }
            }
            if !started {
                promise.succeed(.failed)
            }
        }
    }
}

/// Decides whether a presented client certificate chain is accepted (see ``LegacyTLSContext``).
struct ClientCertificateVerifier: Sendable {
    enum Verdict: Sendable {
        /// Trusted, and resolved to this tenant.
        case trusted(ProviderVerified)
        case refused(String)
    }

    var roots: [Certificate]
    var pinnedFingerprints: Set<String>
    var tenantResolver: any TenantResolver
    /// The leaves this verifier (so this server context) trusted in a full handshake: the only
    /// ones a resumed session of the context can carry.
    var trustedLeaves: TrustedLeaves

    /// The check of a full handshake: the chain, then the tenant.
    func verify(_ chain: [NIOSSLCertificate]) async -> Verdict {
        guard let leaf = chain.first, let leafDER = try? leaf.toDERBytes(),
            let provider = try? ProviderCertificate(derBytes: leafDER)
        else {
            return .refused("no readable client certificate")
        }
        if !self.pinnedFingerprints.contains(provider.fingerprint) {
            guard !self.roots.isEmpty else {
                return .refused("not pinned, and no client CA is configured: \(Self.subject(provider))")
            }
            guard let parsedLeaf = try? Certificate(derEncoded: leafDER) else {
                return .refused("unreadable certificate")
            }
            let intermediates = chain.dropFirst().compactMap { try? Certificate(derEncoded: $0.toDERBytes()) }
            var verifier = Verifier(rootCertificates: CertificateStore(self.roots)) {
                RFC5280Policy()  // expiry checked against the time of validation
            }
            guard
                case .validCertificate = await verifier.validate(
                    leaf: parsedLeaf,
                    intermediates: CertificateStore(intermediates)
                )
            else {
                return .refused("does not chain to a configured client CA (or has expired): \(Self.subject(provider))")
            }
        }
        let verdict = self.resolveTenant(leaf, provider)
        if case .trusted = verdict {
            self.trustedLeaves.insert(provider.fingerprint)
        }
        return verdict
    }

    /// The check of a resumed session, whose handshake carried no certificate: the session's
    /// certificate must be one this verifier trusted in a full handshake (pinned or chained then;
    /// the chain's intermediates are not part of a session), must not have expired since, and
    /// must resolve to a tenant now, as at a full handshake.
    func verifyResumed(_ leaf: NIOSSLCertificate?, now: Date = Date()) -> Verdict {
        guard let leaf, let leafDER = try? leaf.toDERBytes(), let provider = try? ProviderCertificate(derBytes: leafDER)
        else {
            return .refused("a resumed session without a readable client certificate")
        }
        guard self.trustedLeaves.contains(provider.fingerprint) else {
            return .refused(
                "a resumed session whose certificate this server context never trusted: \(Self.subject(provider))"
            )
        }
        guard Double(leaf.notValidAfter) > now.timeIntervalSince1970 else {
            return .refused("a resumed session whose certificate has expired: \(Self.subject(provider))")
        }
        return self.resolveTenant(leaf, provider)
    }

    private func resolveTenant(_ leaf: NIOSSLCertificate, _ provider: ProviderCertificate) -> Verdict {
        guard let tenant = self.tenantResolver.tenant(for: leaf) else {
            if let userID = provider.userID, !Tenant.isValidTopic(userID) {
                return .refused(
                    "its UID= is not a valid bundle id and would become the apns-topic: \(Self.subject(provider))"
                )
            }
            return .refused("no tenant matches: \(Self.subject(provider))")
        }
        return .trusted(ProviderVerified(tenant: tenant, certificate: leaf))
    }

    /// The certificate as a log names it: its `UID=` cut to 128 characters (anyone can mint a
    /// certificate with a 30,000-character one) and its fingerprint's start.
    static func subject(_ provider: ProviderCertificate) -> String {
        let userID = provider.userID ?? "-"
        let shown = userID.count > 128 ? "\(userID.prefix(128))…(\(userID.utf8.count) bytes)" : userID
        return "UID=\(shown) fingerprint=\(provider.fingerprint.prefix(16))…"
    }
}

/// The fingerprints of the client certificates one server context trusted (see
/// ``ClientCertificateVerifier/trustedLeaves``). It grows only by certificates that passed the
/// full check, one entry per distinct provider certificate, and goes with its context at a reload.
final class TrustedLeaves: Sendable {
    private let fingerprints = Mutex<Set<String>>([])

    func insert(_ fingerprint: String) {
        _ = self.fingerprints.withLock { $0.insert(fingerprint) }
    }

    func contains(_ fingerprint: String) -> Bool {
        self.fingerprints.withLock { $0.contains(fingerprint) }
    }
}

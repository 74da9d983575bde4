import BridgeCore
import BridgeServer
import BridgeTestSupport
import Crypto
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import Logging
import NIOCore
import NIOSSL
import Testing

/// docs/configuration.md#tenants with certificates shaped like Apple's, made in-process: UID=, OU=, the
/// environment markers and the topics extension; configured tenants override them; unknown
/// certificates are refused during the handshake; pinned fingerprints; certificate reload.
@Suite("Tenants from provider certificates")
struct TenantTests {
    static let frame = FrameBuilder.frame(
        .itemized,
        identifier: 1,
        token: FrameBuilder.token(1),
        payload: FrameBuilder.payload()
    )

    @Test("UID=, OU=, markers, topics and the fingerprint are read from the certificate")
    func readsAppleFields() throws {
        let pki = try DevelopmentCA()
        let identity = try pki.providerIdentity(
            bundleID: "com.example.shop",
            teamID: "TEAMSHOP01",
            sandboxMarker: true,
            topics: ["com.example.shop", "com.example.shop.voip"]
        )
        let certificate = try ProviderCertificate(identity.certificate)
        #expect(certificate.userID == "com.example.shop")
        #expect(certificate.organizationalUnit == "TEAMSHOP01")
        #expect(certificate.hasSandboxMarker)
        #expect(!certificate.hasProductionMarker)
        #expect(certificate.markedEnvironment == .sandbox)
        #expect(certificate.topics == ["com.example.shop", "com.example.shop.voip"])
        let expected = SHA256.hash(data: try identity.certificate.toDERBytes()).map { String(format: "%02x", $0) }
            .joined()
        #expect(certificate.fingerprint == expected)
        #expect(certificate.fingerprint.count == 64)

        let universal = try ProviderCertificate(
            try pki.providerIdentity(bundleID: "u", sandboxMarker: true, productionMarker: true).certificate
        )
        #expect(universal.markedEnvironment == nil)
        let production = try ProviderCertificate(
            try pki.providerIdentity(bundleID: "p", productionMarker: true).certificate
        )
        #expect(production.markedEnvironment == .production)
    }

    @Test("Configuration overrides the certificate; the certificate's markers override the default")
    func resolutionRules() throws {
        let pki = try DevelopmentCA()
        let sandboxOnly = try ProviderCertificate(
            try pki.providerIdentity(bundleID: "com.example.a", sandboxMarker: true).certificate
        )
        let productionOnly = try ProviderCertificate(
            try pki.providerIdentity(bundleID: "com.example.b", productionMarker: true).certificate
        )
        let universal = try ProviderCertificate(
            try pki.providerIdentity(bundleID: "com.example.c", sandboxMarker: true, productionMarker: true).certificate
        )
        let pinned = try ProviderCertificate(try pki.providerIdentity(bundleID: "com.example.a").certificate)
        let unlisted = try ProviderCertificate(try pki.providerIdentity(bundleID: "com.example.zzz").certificate)

        let resolver = ConfiguredTenantResolver(
            rules: [
                TenantRule(name: "a", userID: "com.example.a"),
                TenantRule(
                    name: "b",
                    userID: "com.example.b",
                    topic: "com.example.b.override",
                    environment: .sandbox,
                    credentials: "team-b"
                ),
                TenantRule(name: "c", userID: "com.example.c"),
                TenantRule(name: "pinned", fingerprints: [pinned.fingerprint.uppercased()], environment: .production),
            ],
            defaultEnvironment: .production
        )
        #expect(resolver.tenant(for: sandboxOnly) == Tenant(name: "a", topic: "com.example.a", environment: .sandbox))
        #expect(
            resolver.tenant(for: productionOnly)
                == Tenant(name: "b", topic: "com.example.b.override", environment: .sandbox, credentials: "team-b")
        )
        #expect(resolver.tenant(for: universal)?.environment == .production)  // both markers: the default
        // A fingerprint match wins over the UID= match (same UID as tenant a).
        #expect(resolver.tenant(for: pinned)?.name == "pinned")
        #expect(resolver.tenant(for: pinned)?.topic == "com.example.a")
        #expect(resolver.pinnedFingerprints == [pinned.fingerprint])
        // Tenants are configured: an unlisted certificate has none.
        #expect(resolver.tenant(for: unlisted) == nil)

        // No tenant configured: every certificate with a UID= is a tenant of its own.
        let open = ConfiguredTenantResolver(rules: [], defaultEnvironment: .sandbox)
        #expect(
            open.tenant(for: unlisted)
                == Tenant(name: "com.example.zzz", topic: "com.example.zzz", environment: .sandbox)
        )
        #expect(open.tenant(for: productionOnly)?.environment == .production)
        let noUID = try ProviderCertificate(try pki.providerIdentity(bundleID: nil).certificate)
        #expect(open.tenant(for: noUID) == nil)
    }

    @Test("Over TLS: the tenant's topic and environment reach the upstream; an unknown certificate fails the handshake")
    func gatewayUsesConfiguredTenants() async throws {
        let pki = try DevelopmentCA()
        let resolver = ConfiguredTenantResolver(
            rules: [TenantRule(name: "shop", userID: "com.example.shop", topic: "com.example.shop.topic")],
            defaultEnvironment: .production
        )
        try await withResource(try await GatewayHarness.start(pki: pki, tenantResolver: resolver)) { harness in

            let known = try await LegacyConnection.connect(
                to: harness.server.localAddress,
                identity: try pki.providerIdentity(bundleID: "com.example.shop", sandboxMarker: true),
                trusting: pki.caCertificate
            )
            try await known.send(Self.frame)
            try await harness.forwarder.waitForLedgerCount(1, on: known.channel.eventLoop)
            let tenant = try #require(harness.forwarder.ledger.first?.tenant)
            #expect(tenant.name == "shop")
            #expect(tenant.topic == "com.example.shop.topic")
            #expect(tenant.environment == .sandbox)
            await known.close()

            // Refused during the handshake: the client's handshake fails, nothing is forwarded.
            let unknown = try await LegacyConnection.connect(
                to: harness.server.localAddress,
                identity: try pki.providerIdentity(bundleID: "com.example.unknown"),
                trusting: pki.caCertificate
            )
            try? await unknown.send(Self.frame)
            #expect(try await unknown.bytesUntilClose().readableBytes == 0)
            #expect(harness.forwarder.ledger.count == 1)
        }
    }

    @Test("A pinned fingerprint is trusted without the CA; the same certificate unpinned is refused")
    func pinnedFingerprints() async throws {
        let pki = try DevelopmentCA()
        let otherCA = try DevelopmentCA(name: "somebody else's CA")
        let stranger = try otherCA.providerIdentity(bundleID: "com.example.stranger")
        let fingerprint = try ProviderCertificate(stranger.certificate).fingerprint

        for pinned in [true, false] {
            let resolver = ConfiguredTenantResolver(
                rules: [
                    TenantRule(
                        name: "stranger",
                        fingerprints: pinned ? [fingerprint] : [],
                        userID: "com.example.stranger"
                    )
                ],
                defaultEnvironment: .sandbox
            )
            try await withResource(try await GatewayHarness.start(pki: pki, tenantResolver: resolver)) { harness in
                let client = try await LegacyConnection.connect(
                    to: harness.server.localAddress,
                    identity: stranger,
                    trusting: pki.caCertificate
                )
                try? await client.send(Self.frame)
                if pinned {
                    try await harness.forwarder.waitForLedgerCount(1, on: client.channel.eventLoop)
                    #expect(client.isActive)
                    await client.close()
                } else {
                    #expect(try await client.bytesUntilClose().readableBytes == 0)
                    #expect(harness.forwarder.ledger.isEmpty)
                }
            }
        }
    }

    @Test("Replaced certificates: new handshakes use them, open connections keep working")
    func certificateReload() async throws {
        let pki = try DevelopmentCA()
        let resolver = ConfiguredTenantResolver(rules: [], defaultEnvironment: .sandbox)
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let tls = try LegacyTLSContext(
            configuration: GatewayConfiguration.loopback(pki: pki).tls,
            tenantResolver: resolver,
            logger: logger
        )
        try await withResource(try await GatewayHarness.start(pki: pki, tenantResolver: resolver, tlsContext: tls)) {
            harness in
            let before = try await harness.connect()
            try await before.send(Self.frame)
            try await harness.forwarder.waitForLedgerCount(1, on: before.channel.eventLoop)

            // A new server certificate from a new CA, which also issues the providers' certificates.
            let renewed = try DevelopmentCA(name: "renewed CA")
            try tls.reload(GatewayConfiguration.loopback(pki: renewed).tls)

            try await before.send(
                FrameBuilder.frame(
                    .itemized,
                    identifier: 2,
                    token: FrameBuilder.token(2),
                    payload: FrameBuilder.payload()
                )
            )
            try await harness.forwarder.waitForLedgerCount(2, on: before.channel.eventLoop)
            #expect(before.isActive)

            let after = try await LegacyConnection.connect(
                to: harness.server.localAddress,
                identity: try renewed.providerIdentity(bundleID: "com.example.app"),
                trusting: renewed.caCertificate
            )
            try await after.send(
                FrameBuilder.frame(
                    .itemized,
                    identifier: 3,
                    token: FrameBuilder.token(3),
                    payload: FrameBuilder.payload()
                )
            )
            try await harness.forwarder.waitForLedgerCount(3, on: after.channel.eventLoop)

            // A client that trusts only the old CA no longer completes a handshake.
            let stale = try await harness.connect()
            try? await stale.send(Self.frame)
            #expect(try await stale.bytesUntilClose().readableBytes == 0)
            #expect(harness.forwarder.ledger.count == 3)
            await before.close()
            await after.close()
        }
    }
}

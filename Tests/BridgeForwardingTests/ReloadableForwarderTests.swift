import BridgeCore
import BridgeForwarding
import BridgeTestSupport
import Crypto
import DevelopmentPKI
import LegacyProtocol
import Logging
import MockAPNs
import NIOCore
import NIOPosix
import NIOSSL
import Testing
import UpstreamAPNs

/// Upstream credentials replaced by a reload while notifications are in
/// flight. Each one finishes on the client it started on; what is sent afterwards goes with the
/// new credentials; the old client is shut down once its last notification is answered.
@Suite("Reload: upstream credentials replaced in flight")
struct ReloadableForwarderTests {
    static let newKeyID = "KEY7654321"

    @Test("Nothing in flight is lost when the signing key is replaced; new notifications use the new key")
    func replacedWhileInFlight() async throws {
        let newKey = P256.Signing.PrivateKey()
        try await withResource(
            try await UpstreamHarness.start(configureMock: { mock in
                mock.signingKeys.append(
                    .init(keyID: Self.newKeyID, teamID: UpstreamHarness.teamID, publicKey: newKey.publicKey)
                )
            })
        ) { harness in
            // Answers wait a moment, so the first notifications are still in flight at the reload.
            harness.mock.script.delayResponses(by: .milliseconds(200))

            let upstream = ReloadableForwarder(clients: ["main": harness.client], defaultCredentials: "main")
            let old = try #require(upstream.members["main"])
            let eventLoop = MultiThreadedEventLoopGroup.singleton.any()
            let before = (1...20).map { upstream.send(UpstreamHarness.notification($0), on: eventLoop) }
            #expect(old.inFlight == 20)

            let tokens = AuthenticationTokenSource(
                signer: AuthenticationTokenSigner(key: newKey, keyID: Self.newKeyID, teamID: UpstreamHarness.teamID),
                logger: .forTests()
            )
            var configuration = APNsForwarder.Configuration()
            let endpoint = APNsEndpoint(
                host: "127.0.0.1",
                port: harness.mock.port,
                serverHostname: "localhost",
                trustRoots: .certificates([harness.pki.caCertificate])
            )
            configuration.endpoints = [.sandbox: endpoint, .production: endpoint]
            let replacement = try APNsForwarder(
                configuration: configuration,
                credentials: .token(tokens),
                logger: .forTests()
            )
            upstream.update(replacing: ["main": replacement], removing: [], defaultCredentials: "main")
            let after = (21...40).map { upstream.send(UpstreamHarness.notification($0), on: eventLoop) }

            for outcome in before + after {
                #expect(try await outcome.get() == .accepted)
            }
            #expect(old.inFlight == 0)
            // The retired client was shut down with its last answer: it takes nothing now.
            #expect(
                try await old.client.send(UpstreamHarness.notification(41), on: eventLoop).get()
                    == .gaveUp(.processingError)
            )
            #expect(upstream.members["main"]?.client === replacement)
            let keys = Dictionary(grouping: harness.mock.ledger.accepted, by: { $0.keyID ?? "none" }).mapValues(\.count)
            #expect(keys == [UpstreamHarness.keyID: 20, Self.newKeyID: 20])
            replacement.shutdown()
        }
    }
}

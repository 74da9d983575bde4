import Crypto
import Foundation
import NIOCore
import NIOSSL

/// How a ``MockAPNsServer`` listens and what it accepts.
package struct MockAPNsConfiguration: Sendable {
    /// A signing key the mock accepts authentication tokens from: its `kid`, the team (`iss`) and the
    /// public half of the `.p8` key.
    package struct SigningKey: Sendable {
        package var keyID: String
        package var teamID: String
        package var publicKey: P256.Signing.PublicKey

        package init(keyID: String, teamID: String, publicKey: P256.Signing.PublicKey) {
            self.keyID = keyID
            self.teamID = teamID
            self.publicKey = publicKey
        }
    }

    package var host: String = "127.0.0.1"
    /// 0 picks a free port.
    package var port: Int = 2197
    package var certificateChain: [NIOSSLCertificate]
    package var privateKey: NIOSSLPrivateKey
    /// Client certificates (certificate auth) are checked against these; a connection without
    /// one must send authentication tokens.
    package var clientCertificateTrustRoots: NIOSSLTrustRoots?
    package var signingKeys: [SigningKey] = []
    /// Topics the mock accepts; `nil` accepts any.
    package var topics: Set<String>?
    /// `MAX_CONCURRENT_STREAMS` sent to new connections (APNs sends 1000 or fewer).
    package var maximumConcurrentStreams: Int = 1000
    /// Authentication tokens older than this are refused with `ExpiredProviderToken`.
    package var providerTokenMaximumAge: TimeInterval = 3600
    /// Keep every request in the ledger (tests); `false` keeps counters only (load tests).
    package var recordsRequests: Bool = true
    /// The clock used for authentication-token ages and 410 timestamps.
    package var now: @Sendable () -> Date = { Date() }
    /// Called on the connection's event loop for each request answered, as it is answered
    /// (benchmarks time arrivals with it). Keep it short: it runs on the mock's hot path.
    package var onAnswer: (@Sendable (MockAPNsRequestRecord) -> Void)?

    package init(certificateChain: [NIOSSLCertificate], privateKey: NIOSSLPrivateKey) {
        self.certificateChain = certificateChain
        self.privateKey = privateKey
    }
}

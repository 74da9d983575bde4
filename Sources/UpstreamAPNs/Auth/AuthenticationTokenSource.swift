import CoreMetrics
import Foundation
import Logging
import Synchronization

/// The one authentication token of a signing key, shared by every connection that uses the key.
///
/// Apple's rules (docs/upstream.md#requests): refresh a token after 50 minutes (tokens older than an hour are
/// refused), and never more often than once per 20 minutes (`TooManyProviderTokenUpdates`).
/// When APNs answers `ExpiredProviderToken` earlier than expected (a skewed clock), the token is
/// replaced at once if the 20 minutes allow it; otherwise the same token is used for the retry.
///
/// Time is an input: tests inject a clock and run through hours in a moment.
public final class AuthenticationTokenSource: Sendable {
    /// A token and its generation (1 for the first token minted).
    public struct Token: Sendable, Hashable {
        public var value: String
        public var generation: Int
        public var issuedAt: Date
        /// `bearer <token>`, built once.
        public var authorization: String
    }

    public static let refreshAge: TimeInterval = 50 * 60
    public static let minimumAgeBeforeRefresh: TimeInterval = 20 * 60

    private let signer: AuthenticationTokenSigner
    private let now: @Sendable () -> Date
    private let state = Mutex<State>(State())
    private let logger: Logger
    private let minted: Counter

    private struct State {
        var current: Token?
        var mints = 0
    }

    /// - Parameters:
    ///   - signer: signs the ES256 tokens (the team id, key id and private key).
    ///   - logger: where each mint is logged (key id and reason, never the token).
    ///   - metricsFactory: where the minted-token counter goes.
    ///   - metricsPrefix: the start of the minted-token counter's name, as the clients'
    ///     (``APNsClient/Configuration/metricsPrefix``).
    ///   - now: the clock tokens are dated and aged by.
    public init(
        signer: AuthenticationTokenSigner,
        logger: Logger,
        metricsFactory: any MetricsFactory = MetricsSystem.factory,
        metricsPrefix: String = APNsClientMetrics.defaultPrefix,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.signer = signer
        self.now = now
        self.logger = logger
        self.minted = Counter(label: metricsPrefix + APNsClientMetrics.tokensMintedName, factory: metricsFactory)
    }

    public var keyID: String { self.signer.keyID }

    /// How many tokens were minted so far.
    public var mintCount: Int { self.state.withLock { $0.mints } }

    /// The token to use now; mints one when there is none or it is 50 minutes old.
    public func currentToken() throws -> Token {
        let now = self.now()
        return try self.state.withLock { state in
            if let token = state.current, now.timeIntervalSince(token.issuedAt) < Self.refreshAge {
                return token
            }
            return try self.mint(&state, at: now, why: state.current == nil ? "first use" : "50 minutes old")
        }
    }

    /// APNs refused `generation` as expired. Returns the token for the retry: a new one when
    /// `generation` is still current and 20 minutes have passed since it was minted; otherwise
    /// the current one (another request may have replaced it already).
    public func tokenAfterExpiry(of generation: Int) throws -> Token {
        let now = self.now()
        return try self.state.withLock { state in
            guard let token = state.current else {
                return try self.mint(&state, at: now, why: "first use")
            }
            guard token.generation == generation,
                now.timeIntervalSince(token.issuedAt) >= Self.minimumAgeBeforeRefresh
            else {
                return token
            }
            return try self.mint(&state, at: now, why: "APNs answered ExpiredProviderToken")
        }
    }

    private func mint(_ state: inout State, at now: Date, why: String) throws -> Token {
        let value = try self.signer.sign(issuedAt: now)
        let generation = (state.current?.generation ?? 0) + 1
        let token = Token(value: value, generation: generation, issuedAt: now, authorization: "bearer " + value)
        state.current = token
        state.mints += 1
        self.minted.increment()
        // The token itself is a secret: never logged.
        self.logger.info(
            "minted a authentication token",
            metadata: ["kid": "\(self.signer.keyID)", "generation": "\(generation)", "reason": "\(why)"]
        )
        return token
    }
}

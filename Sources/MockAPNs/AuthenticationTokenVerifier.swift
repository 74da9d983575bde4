import Crypto
import Foundation
import Synchronization

/// Checks authentication tokens the way APNs does: a JWT signed ES256 by a known key (`kid`), issued by
/// that key's team (`iss`), not older than the maximum age (`iat`). Signatures already checked
/// are remembered, so each token costs one verification.
final class AuthenticationTokenVerifier: Sendable {
    struct Claims: Sendable, Hashable {
        var keyID: String
        var teamID: String
        var issuedAt: Int64
    }

    private struct Header: Decodable {
        var alg: String
        var kid: String?
    }

    private struct Payload: Decodable {
        var iss: String?
        var iat: Int64?
    }

    enum Verification {
        case valid(Claims)
        case invalid(MockAPNsReason)
    }

    private let keys: [String: MockAPNsConfiguration.SigningKey]
    private let verified = Mutex<[String: Claims]>([:])
    private static let cacheLimit = 1024

    init(keys: [MockAPNsConfiguration.SigningKey]) {
        self.keys = Dictionary(keys.map { ($0.keyID, $0) }, uniquingKeysWith: { $1 })
    }

    /// The token's claims, or the reason APNs would give for refusing it.
    func verify(_ token: String, now: Date, maximumAge: TimeInterval) -> Verification {
        let claims: Claims
        if let known = self.verified.withLock({ $0[token] }) {
            claims = known
        } else {
            switch self.checkSignature(token) {
            case .valid(let checked):
                claims = checked
                self.verified.withLock { cache in
                    if cache.count >= Self.cacheLimit { cache.removeAll() }
                    cache[token] = checked
                }
            case .invalid(let reason):
                return .invalid(reason)
            }
        }
        if now.timeIntervalSince1970 - Double(claims.issuedAt) > maximumAge {
            return .invalid(.expiredProviderToken)
        }
        return .valid(claims)
    }

    private func checkSignature(_ token: String) -> Verification {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
            let headerData = Self.base64URLDecoded(parts[0]),
            let payloadData = Self.base64URLDecoded(parts[1]),
            let signatureData = Self.base64URLDecoded(parts[2]),
            let header = try? JSONDecoder().decode(Header.self, from: headerData),
            let payload = try? JSONDecoder().decode(Payload.self, from: payloadData)
        else {
            return .invalid(.invalidProviderToken)
        }
        guard header.alg == "ES256", let keyID = header.kid, let issuer = payload.iss, let issuedAt = payload.iat else {
            return .invalid(.invalidProviderToken)
        }
        guard let key = self.keys[keyID] else {
            return .invalid(.invalidProviderToken)
        }
        guard key.teamID == issuer else {
            return .invalid(.invalidProviderToken)
        }
        guard let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signatureData),
            key.publicKey.isValidSignature(signature, for: Data((parts[0] + "." + parts[1]).utf8))
        else {
            return .invalid(.invalidProviderToken)
        }
        return .valid(Claims(keyID: keyID, teamID: issuer, issuedAt: issuedAt))
    }

    /// RFC 7515's base64url without padding, decoded.
    static func base64URLDecoded(_ text: Substring) -> Data? {
        var base64 = String(text.map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 })
        while base64.count % 4 != 0 { base64.append("=") }
        return Data(base64Encoded: base64)
    }
}

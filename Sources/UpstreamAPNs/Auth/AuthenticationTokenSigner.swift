import Crypto
import Foundation

/// Signs APNs authentication tokens: JWTs with header `{"alg":"ES256","kid":…}` and claims
/// `{"iss":<team id>,"iat":<seconds>}`, signed with the `.p8` key Apple issues.
public struct AuthenticationTokenSigner: Sendable {
    public var keyID: String
    public var teamID: String
    private let key: P256.Signing.PrivateKey

    public init(key: P256.Signing.PrivateKey, keyID: String, teamID: String) {
        self.key = key
        self.keyID = keyID
        self.teamID = teamID
    }

    /// Reads a `.p8` file's contents (PEM, `BEGIN PRIVATE KEY`).
    public init(p8PEM: String, keyID: String, teamID: String) throws {
        self.init(key: try P256.Signing.PrivateKey(pemRepresentation: p8PEM), keyID: keyID, teamID: teamID)
    }

    public var publicKey: P256.Signing.PublicKey { self.key.publicKey }

    public func sign(issuedAt: Date) throws -> String {
        let header = #"{"alg":"ES256","kid":"\#(Self.jsonEscaped(self.keyID))"}"#
        let claims = #"{"iss":"\#(Self.jsonEscaped(self.teamID))","iat":\#(Int64(issuedAt.timeIntervalSince1970))}"#
        let signingInput = Base64URL.encode(Data(header.utf8)) + "." + Base64URL.encode(Data(claims.utf8))
        let signature = try self.key.signature(for: Data(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
    }

    private static func jsonEscaped(_ value: String) -> String {
        value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
    }
}

import BridgeCore
import NIOSSL

/// One configured tenant: how its certificates are recognised and what overrides what they say.
public struct TenantRule: Hashable, Sendable {
    public var name: String
    /// SHA-256 fingerprints (lowercase hex) of certificates that belong to this tenant. A
    /// certificate matched this way is trusted for its fingerprint, whatever CA issued it.
    public var fingerprints: Set<String>
    /// The subject `UID=` (bundle id) of certificates that belong to this tenant.
    public var userID: String?
    /// The `apns-topic`; default: the certificate's `UID=`.
    public var topic: String?
    /// Default: from the certificate's environment markers, else the listener's default.
    public var environment: APNsEnvironment?
    /// Upstream credentials by name; default: the default credentials.
    public var credentials: String?
    /// Live Activity channels reached through channel tokens.
    public var channels: BroadcastChannels
    /// Its own timing of the close after an error-response (docs/protocol.md#closing).
    public var closing: ClosingOverrides

    public init(
        name: String,
        fingerprints: Set<String> = [],
        userID: String? = nil,
        topic: String? = nil,
        environment: APNsEnvironment? = nil,
        credentials: String? = nil,
        channels: BroadcastChannels = BroadcastChannels(),
        closing: ClosingOverrides = ClosingOverrides()
    ) {
        self.name = name
        self.fingerprints = Set(fingerprints.map(Self.normalizedFingerprint))
        self.userID = userID
        self.topic = topic
        self.environment = environment
        self.credentials = credentials
        self.channels = channels
        self.closing = closing
    }

    /// Lowercase hex without separators: `AB:CD:…` and `abcd…` are the same fingerprint.
    public static func normalizedFingerprint(_ text: String) -> String {
        String(text.lowercased().filter { $0.isHexDigit })
    }
}

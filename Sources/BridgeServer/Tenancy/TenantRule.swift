import BridgeCore
import NIOSSL

/// One configured tenant: how its certificates are recognised and what overrides what they say.
package struct TenantRule: Hashable, Sendable {
    package var name: String
    /// SHA-256 fingerprints (lowercase hex) of certificates that belong to this tenant. A
    /// certificate matched this way is trusted for its fingerprint, whatever CA issued it.
    package var fingerprints: Set<String>
    /// The subject `UID=` (bundle id) of certificates that belong to this tenant.
    package var userID: String?
    /// The `apns-topic`; default: the certificate's `UID=`.
    package var topic: String?
    /// Default: from the certificate's environment markers, else the listener's default.
    package var environment: APNsEnvironment?
    /// Upstream credentials by name; default: the default credentials.
    package var credentials: String?
    /// Live Activity channels reached through channel tokens.
    package var channels: BroadcastChannels
    /// Its own timing of the close after an error-response (docs/protocol.md#closing).
    package var closing: ClosingOverrides

    package init(
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
    package static func normalizedFingerprint(_ text: String) -> String {
        String(text.lowercased().filter { $0.isHexDigit })
    }
}

import LegacyProtocol
import NIOCore

/// The app a provider connection pushes for, resolved from its client certificate when the TLS
/// handshake completes (docs/configuration.md#tenants).
public struct Tenant: Hashable, Sendable, CustomStringConvertible {
    /// A stable name for logs, metrics and the stores (for example the bundle id).
    public var name: String
    /// The `apns-topic` of this tenant's notifications; `nil` when none could be resolved, in
    /// which case every notification is answered with status 3.
    public var topic: String?
    public var environment: APNsEnvironment
    /// The name of the upstream credentials (signing key or certificate) this tenant's
    /// notifications are sent with; `nil` for the default ones.
    public var credentials: String?
    /// The topics the provider certificate lists (extension `1.2.840.113635.100.6.3.6`), for
    /// diagnostics; the notifications go to ``topic``.
    public var certificateTopics: [String]
    /// The Live Activity channels its provider reaches through channel tokens.
    public var channels: BroadcastChannels
    /// Its own timing of the close after an error-response, where the configuration gives one
    /// (docs/protocol.md#closing): a provider that only writes wants Apple's quick close, one
    /// that reads late the listener's defaults.
    public var closing: ClosingOverrides

    public init(
        name: String,
        topic: String?,
        environment: APNsEnvironment,
        credentials: String? = nil,
        certificateTopics: [String] = [],
        channels: BroadcastChannels = BroadcastChannels(),
        closing: ClosingOverrides = ClosingOverrides()
    ) {
        self.name = name
        self.topic = topic
        self.environment = environment
        self.credentials = credentials
        self.certificateTopics = certificateTopics
        self.channels = channels
        self.closing = closing
    }

    /// 5120 bytes for VoIP topics, 4096 otherwise.
    public var maximumPayloadLength: Int {
        if let topic, topic.hasSuffix(".voip") {
            return LegacyProtocolLimits.maximumVoIPPayloadLength
        }
        return LegacyProtocolLimits.maximumPayloadLength
    }

    /// The bundle id a broadcast names in its path: the topic without a push-type suffix (APNs
    /// answers `TopicDisallowed` to a suffixed one).
    public var broadcastBundleID: String? {
        guard let topic else { return nil }
        for suffix in [".push-type.liveactivity", ".voip", ".complication", ".pushkit.fileprovider"]
        where topic.hasSuffix(suffix) {
            return String(topic.dropLast(suffix.count))
        }
        return topic
    }

    public var description: String {
        "\(self.name) (\(self.environment.rawValue))"
    }

    /// Whether `topic` is an APNs topic: a bundle id with an optional push-type suffix, dot-separated
    /// non-empty labels of ASCII letters, digits, hyphens (and underscores, which some old App IDs
    /// have), at most 255 bytes. Every topic that becomes an `apns-topic` header is checked where
    /// it enters (configuration, the TLS handshake): a value that breaks the header (a CR/LF
    /// smuggled into a certificate's `UID=`) would make APNs close a connection other tenants use.
    public static func isValidTopic(_ topic: String) -> Bool {
        let utf8 = topic.utf8
        guard !utf8.isEmpty, utf8.count <= 255 else { return false }
        var previous: UInt8 = UInt8(ascii: ".")
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"):
                break
            case UInt8(ascii: "."):
                if previous == UInt8(ascii: ".") { return false }  // an empty label
            default:
                return false
            }
            previous = byte
        }
        return previous != UInt8(ascii: ".")
    }
}

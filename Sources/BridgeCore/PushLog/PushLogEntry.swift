import LegacyProtocol
import NIOCore

/// What the push log keeps of one legacy notification (docs/operations.md#did-it-go): where it
/// came from, what was sent to APNs under which id, what APNs answered, and what the provider
/// was told. Never the payload; the device token as a prefix and a hash unless the
/// configuration keeps whole tokens (``PushLog/keepsFullTokens``).
///
/// A plain value of fixed size apart from its strings: the tenant's name is the tenant's own
/// (a retain), and the reason, `apns-unique-id` and failure come only with answers that carry
/// them. So an accepted notification's entry allocates nothing (docs/performance.md, "The push
/// log").
public struct PushLogEntry: Hashable, Sendable {
    /// The device token in a form that can be looked up but does not print it whole.
    public struct Token: Hashable, Sendable {
        /// Its first 4 bytes, big-endian (fewer for a shorter token, zero-filled).
        public var prefix: UInt32
        /// Its length in bytes.
        public var length: UInt8
        /// ``PushLog/tokenHash(_:)`` of every byte: a lookup by full token compares this.
        public var hash: UInt64
        /// Every byte, only when the configuration keeps whole tokens.
        public var bytes: [UInt8]?

        public init(_ token: ByteBuffer, keepingBytes: Bool) {
            var prefix: UInt32 = 0
            token.withUnsafeReadableBytes { bytes in
                for index in 0..<4 {
                    prefix = prefix << 8 | UInt32(index < bytes.count ? bytes[index] : 0)
                }
            }
            self.prefix = prefix
            self.length = UInt8(clamping: token.readableBytes)
            self.hash = PushLog.tokenHash(token)
            self.bytes = keepingBytes ? Array(token.readableBytesView) : nil
        }

        /// The prefix as hex with an ellipsis, or every byte as hex when kept.
        public var display: String {
            if let bytes { return bytes.map { Self.hex($0) }.joined() }
            let count = min(Int(self.length), 4)
            let shown = (0..<count).map { Self.hex(UInt8(truncatingIfNeeded: self.prefix >> (24 - 8 * $0))) }.joined()
            return Int(self.length) > count ? shown + "…" : shown
        }

        /// The hash as 16 hex digits.
        public var hashText: String {
            let hex = String(self.hash, radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }

        private static func hex(_ byte: UInt8) -> String {
            let digits = Array("0123456789abcdef")
            return String([digits[Int(byte >> 4)], digits[Int(byte & 0xF)]])
        }
    }

    /// Numbered by the log as it records, from 1: a newer entry has a higher number.
    public var sequence: UInt64 = 0
    /// When the notification was forwarded, in milliseconds since 1970.
    public var received: UInt64
    public var tenant: String
    public var environment: APNsEnvironment
    public var command: NotificationFrame.Command
    public var identifier: NotificationIdentifier
    public var token: Token
    /// The channel's name, for a broadcast.
    public var channel: String?
    /// The `apns-id` (or a broadcast's `apns-request-id`) every attempt was sent with.
    public var apnsID: ForwardedNotification.ID
    /// `apns-unique-id`, when APNs gave one (its development environment and broadcasts).
    public var uniqueID: String?
    /// The HTTP status of the final answer; 0 when none came.
    public var status: UInt16
    /// APNs' reason, with a refusal.
    public var reason: String?
    /// Why no final answer came (the retry budget ran out, the client shut down), without one.
    public var failure: String?
    /// Attempts made (0 when the request was never sent).
    public var attempts: UInt16
    /// From the forward to the final answer, in microseconds.
    public var microseconds: UInt32
    /// The outcome in the provider's terms: what it was told (``told``).
    public var outcome: NotificationOutcome
    /// Answered from a resend record (docs/protocol.md#resend-records) rather than sent again:
    /// then nothing of APNs' is in this entry.
    public var resendMatched: Bool

    public init(
        received: UInt64,
        tenant: String,
        environment: APNsEnvironment,
        command: NotificationFrame.Command,
        identifier: NotificationIdentifier,
        token: Token,
        channel: String?,
        apnsID: ForwardedNotification.ID,
        uniqueID: String? = nil,
        status: UInt16 = 0,
        reason: String? = nil,
        failure: String? = nil,
        attempts: UInt16 = 0,
        microseconds: UInt32 = 0,
        outcome: NotificationOutcome,
        resendMatched: Bool = false
    ) {
        self.received = received
        self.tenant = tenant
        self.environment = environment
        self.command = command
        self.identifier = identifier
        self.token = token
        self.channel = channel
        self.apnsID = apnsID
        self.uniqueID = uniqueID
        self.status = status
        self.reason = reason
        self.failure = failure
        self.attempts = attempts
        self.microseconds = microseconds
        self.outcome = outcome
        self.resendMatched = resendMatched
    }

    /// The entry of a notification as it was forwarded, before APNs' answer fills it in.
    public init(
        _ notification: ForwardedNotification,
        outcome: NotificationOutcome,
        received: UInt64,
        keepingTokenBytes: Bool
    ) {
        let channel: String? =
            switch notification.destination {
            case .device: nil
            case .broadcast(let channel): channel.name
            }
        self.init(
            received: received,
            tenant: notification.tenant.name,
            environment: notification.tenant.environment,
            command: notification.frame.command,
            identifier: notification.frame.identifier,
            token: Token(notification.frame.deviceToken, keepingBytes: keepingTokenBytes),
            channel: channel,
            apnsID: notification.id,
            outcome: outcome
        )
    }

    /// What the provider was told of this notification: nothing (accepted, or given up on
    /// 429s: `dropped`), an error-response with its status (on a connection that already
    /// failed, only its first error-response reaches the provider: docs/protocol.md#after-a-failure),
    /// or nothing while its token went to the feedback list (410).
    public var told: String {
        switch self.outcome {
        case .accepted: "nothing"
        case .unregistered: "feedback list"
        case .rejected(let status), .gaveUp(let status): "error-response \(status)"
        case .dropped: "nothing (dropped)"
        }
    }

    /// The outcome's name: accepted, unregistered, rejected, gave up, dropped.
    public var outcomeName: String {
        switch self.outcome {
        case .accepted: "accepted"
        case .unregistered: "unregistered"
        case .rejected: "rejected"
        case .gaveUp: "gave up"
        case .dropped: "dropped"
        }
    }

    /// Whether APNs took it (200), or a resend record said it had.
    public var isAccepted: Bool { self.outcome == .accepted }
}

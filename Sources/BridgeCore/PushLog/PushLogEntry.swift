import LegacyProtocol
import NIOCore

/// What the push log keeps of one legacy notification (docs/operations.md#did-it-go): where it
/// came from, what was sent to APNs under which id, what APNs answered, and what the provider
/// was told. Never the payload; the device token as a prefix and a hash unless the
/// configuration keeps whole tokens (``PushLog/keepsFullTokens``).
///
/// Kept small and cheap to copy (docs/performance.md, "The push log"): fixed-size fields, the
/// tenant's name (the tenant's own string: a retain), and one optional box for what only some
/// notifications have (a channel, a reason, an `apns-unique-id`, a failure, a whole token). An
/// accepted notification to a device, from the production environment, allocates nothing.
public struct PushLogEntry: Hashable, Sendable {
    /// The device token in a form that can be looked up but does not print it whole.
    public struct Token: Hashable, Sendable {
        /// Its first 4 bytes, big-endian (fewer for a shorter token, zero-filled).
        public var prefix: UInt32
        /// Its length in bytes.
        public var length: UInt8
        /// ``PushLog/tokenHash(_:)`` of every byte: a lookup by whole token compares this.
        public var hash: UInt64

        /// A token as kept (the store's columns).
        public init(prefix: UInt32, length: UInt8, hash: UInt64) {
            self.prefix = prefix
            self.length = length
            self.hash = hash
        }

        public init(_ token: ByteBuffer) {
            let (prefix, hash) = token.withUnsafeReadableBytes { bytes in
                var prefix: UInt32 = 0
                for index in 0..<4 {
                    prefix = prefix << 8 | UInt32(index < bytes.count ? bytes[index] : 0)
                }
                return (prefix, PushLog.tokenHash(bytes))
            }
            self.prefix = prefix
            self.length = UInt8(clamping: token.readableBytes)
            self.hash = hash
        }

        /// The prefix as hex, with an ellipsis when the token is longer.
        public var display: String {
            let count = min(Int(self.length), 4)
            let shown = ByteBuffer(bytes: (0..<count).map { UInt8(truncatingIfNeeded: self.prefix >> (24 - 8 * $0)) })
            return shown.hexDump(format: .compact) + (Int(self.length) > count ? "…" : "")
        }

        /// The hash as 16 hex digits.
        public var hashText: String {
            let hex = String(self.hash, radix: 16)
            return String(repeating: "0", count: 16 - hex.count) + hex
        }
    }

    /// What only some notifications have, in one box: `nil` in the common case.
    public final class Details: Hashable, Sendable {
        public let channel: String?
        public let uniqueID: String?
        public let reason: String?
        public let failure: String?
        public let tokenBytes: [UInt8]?

        init(channel: String?, uniqueID: String?, reason: String?, failure: String?, tokenBytes: [UInt8]?) {
            self.channel = channel
            self.uniqueID = uniqueID
            self.reason = reason
            self.failure = failure
            self.tokenBytes = tokenBytes
        }

        public static func == (lhs: Details, rhs: Details) -> Bool {
            lhs.channel == rhs.channel && lhs.uniqueID == rhs.uniqueID && lhs.reason == rhs.reason
                && lhs.failure == rhs.failure && lhs.tokenBytes == rhs.tokenBytes
        }

        public func hash(into hasher: inout Hasher) {
            hasher.combine(self.channel)
            hasher.combine(self.uniqueID)
            hasher.combine(self.reason)
            hasher.combine(self.failure)
            hasher.combine(self.tokenBytes)
        }
    }

    /// Numbered by the log as it records, from 1: a newer entry has a higher number.
    public var sequence: UInt64 = 0
    /// When the notification was forwarded, on the monotonic clock (`NIODeadline`'s): the log
    /// gives it as wall-clock time when it is read (``PushLog/receivedMilliseconds(of:)``), so
    /// recording reads no clock.
    public var forwardedAt: NIODeadline
    public var tenant: String
    public var environment: APNsEnvironment
    public var command: NotificationFrame.Command
    public var identifier: NotificationIdentifier
    public var token: Token
    /// The `apns-id` (or a broadcast's `apns-request-id`) every attempt was sent with.
    public var apnsID: ForwardedNotification.ID
    /// The HTTP status of the final answer; 0 when none came.
    public var status: UInt16
    /// Attempts made (0 when the request was never sent).
    public var attempts: UInt16
    /// From the forward to the final answer, in microseconds.
    public var microseconds: UInt32
    /// The outcome in the provider's terms: what it was told (``told``).
    public var outcome: NotificationOutcome
    /// Answered from a resend record (docs/protocol.md#resend-records) rather than sent again:
    /// then nothing of APNs' is in this entry.
    public var resendMatched: Bool
    public var details: Details?

    /// The channel's name, for a broadcast.
    public var channel: String? { self.details?.channel }
    /// `apns-unique-id`, when APNs gave one (its development environment and broadcasts).
    public var uniqueID: String? { self.details?.uniqueID }
    /// APNs' reason, with a refusal.
    public var reason: String? { self.details?.reason }
    /// Why no final answer came (the retry budget ran out, the client shut down), without one.
    public var failure: String? { self.details?.failure }
    /// Every byte of the token, when the configuration keeps whole tokens.
    public var tokenBytes: [UInt8]? { self.details?.tokenBytes }

    public init(
        forwardedAt: NIODeadline,
        tenant: String,
        environment: APNsEnvironment,
        command: NotificationFrame.Command,
        identifier: NotificationIdentifier,
        token: Token,
        apnsID: ForwardedNotification.ID,
        status: UInt16 = 0,
        attempts: UInt16 = 0,
        microseconds: UInt32 = 0,
        outcome: NotificationOutcome,
        resendMatched: Bool = false,
        channel: String? = nil,
        uniqueID: String? = nil,
        reason: String? = nil,
        failure: String? = nil,
        tokenBytes: [UInt8]? = nil
    ) {
        self.forwardedAt = forwardedAt
        self.tenant = tenant
        self.environment = environment
        self.command = command
        self.identifier = identifier
        self.token = token
        self.apnsID = apnsID
        self.status = status
        self.attempts = attempts
        self.microseconds = microseconds
        self.outcome = outcome
        self.resendMatched = resendMatched
        if channel != nil || uniqueID != nil || reason != nil || failure != nil || tokenBytes != nil {
            self.details = Details(
                channel: channel,
                uniqueID: uniqueID,
                reason: reason,
                failure: failure,
                tokenBytes: tokenBytes
            )
        }
    }

    /// The entry of `notification`: its tenant, frame, destination and id, with what became of it.
    public init(
        _ notification: ForwardedNotification,
        forwardedAt: NIODeadline,
        keepingTokenBytes: Bool,
        status: UInt16 = 0,
        attempts: UInt16 = 0,
        microseconds: UInt32 = 0,
        outcome: NotificationOutcome,
        resendMatched: Bool = false,
        uniqueID: String? = nil,
        reason: String? = nil,
        failure: String? = nil
    ) {
        // Read in place through the notification's box: copying its frame or tenant out first
        // would retain (and release) each of their buffers and strings.
        let fields = notification.fields
        var channel: String?
        if case .broadcast(let broadcast) = fields.destination {
            channel = broadcast.name
        }
        self.init(
            forwardedAt: forwardedAt,
            tenant: fields.tenant.name,
            environment: fields.tenant.environment,
            command: fields.frame.command,
            identifier: fields.frame.identifier,
            token: Token(fields.frame.deviceToken),
            apnsID: notification.id,
            status: status,
            attempts: attempts,
            microseconds: microseconds,
            outcome: outcome,
            resendMatched: resendMatched,
            channel: channel,
            uniqueID: uniqueID,
            reason: reason,
            failure: failure,
            tokenBytes: keepingTokenBytes ? Array(fields.frame.deviceToken.readableBytesView) : nil
        )
    }

    /// The token as shown: every byte when kept, else its prefix.
    public var tokenDisplay: String {
        self.tokenBytes.map { ByteBuffer(bytes: $0).hexDump(format: .compact) } ?? self.token.display
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

import BridgeCore
import LegacyProtocol
import NIOCore

/// The `push_failures` table's columns (docs/feedback.md#tables), shared by both stores: an
/// entry's fields, each in a column of its own, the outcome as its name and a value.
extension StoredPushFailure {
    /// The columns in the order the statements list them.
    static let columns = """
        run, sequence, received_ms, tenant, environment, command, identifier, token_prefix, token_length, \
        token_hash, token, channel, apns_id, apns_unique_id, status, reason, failure, attempts, microseconds, \
        outcome, outcome_value, resend_matched
        """
    static let columnCount = columns.split(separator: ",").count

    /// The outcome's value: the legacy status, or a 410's timestamp; 0 for the others.
    var outcomeValue: Int64 {
        switch self.entry.outcome {
        case .accepted, .dropped: 0
        case .unregistered(let timestamp): Int64(timestamp)
        case .rejected(let status), .gaveUp(let status): Int64(status.rawValue)
        }
    }

    /// A row read back; `nil` for an outcome or a command this code does not know (a newer
    /// version's), or an apns-id that is not 16 bytes.
    init?(
        run: Int64,
        sequence: Int64,
        receivedMilliseconds: Int64,
        tenant: String,
        environment: String,
        command: Int64,
        identifier: Int64,
        tokenPrefix: Int64,
        tokenLength: Int64,
        tokenHash: Int64,
        token: ByteBuffer?,
        channel: String?,
        apnsID: ByteBuffer,
        uniqueID: String?,
        status: Int64,
        reason: String?,
        failure: String?,
        attempts: Int64,
        microseconds: Int64,
        outcome: String,
        outcomeValue: Int64,
        resendMatched: Bool
    ) {
        let legacyStatus = ErrorResponseStatus(rawValue: UInt8(clamping: outcomeValue))
        let decoded: NotificationOutcome
        switch outcome {
        case "accepted": decoded = .accepted
        case "unregistered": decoded = .unregistered(timestamp: UInt32(clamping: outcomeValue))
        case "rejected": decoded = .rejected(legacyStatus)
        case "gave up": decoded = .gaveUp(legacyStatus)
        case "dropped": decoded = .dropped
        default: return nil
        }
        guard let command = NotificationFrame.Command(rawValue: UInt8(clamping: command)),
            let apnsID = ForwardedNotification.ID(stored: apnsID)
        else { return nil }
        var entry = PushLogEntry(
            forwardedAt: .uptimeNanoseconds(0),
            tenant: tenant,
            environment: APNsEnvironment(rawValue: environment) ?? .production,
            command: command,
            identifier: NotificationIdentifier(rawValue: UInt32(truncatingIfNeeded: identifier)),
            token: PushLogEntry.Token(
                prefix: UInt32(truncatingIfNeeded: tokenPrefix),
                length: UInt8(clamping: tokenLength),
                hash: UInt64(bitPattern: tokenHash)
            ),
            apnsID: apnsID,
            status: UInt16(clamping: status),
            attempts: UInt16(clamping: attempts),
            microseconds: UInt32(clamping: microseconds),
            outcome: decoded,
            resendMatched: resendMatched,
            channel: channel,
            uniqueID: uniqueID,
            reason: reason,
            failure: failure,
            tokenBytes: token.map { Array($0.readableBytesView) }
        )
        entry.sequence = UInt64(clamping: sequence)
        self.init(entry, run: UInt64(bitPattern: run), receivedMilliseconds: UInt64(clamping: receivedMilliseconds))
    }
}

extension PushLogQuery {
    /// A `tokenPrefix` filter over the `token_prefix` column (the token's first 4 bytes,
    /// big-endian): the column shifted right by `shift` bits equals `value`, and the token has at
    /// least `count` bytes.
    var storedTokenPrefix: (value: Int64, shift: Int64, count: Int64)? {
        guard let prefix = self.tokenPrefix, !prefix.isEmpty else { return nil }
        let bytes = prefix.prefix(4)
        let value = bytes.reduce(Int64(0)) { $0 << 8 | Int64($1) }
        return (value, Int64(8 * (4 - bytes.count)), Int64(prefix.count))
    }

    /// The most rows a store returns for one query.
    var storedLimit: Int64 { Int64(max(0, min(self.limit, Self.maximumLimit))) }
}

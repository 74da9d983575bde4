import BridgeCore
import Foundation
import LegacyProtocol
import UpstreamAPNs

/// One push log entry as the admin port's `/push-log` sends it and `apns-bridge log` reads it:
/// text and numbers, with the names docs/operations.md#did-it-go lists.
package struct PushLogRecord: Codable, Hashable, Sendable {
    package var sequence: UInt64
    /// ISO 8601 with milliseconds, UTC.
    package var received: String
    package var receivedMilliseconds: UInt64
    package var tenant: String
    package var environment: String
    package var command: Int
    package var identifier: UInt32
    /// The token's first 4 bytes as hex and `…` (every byte with `pushLog.fullTokens`).
    package var token: String
    package var tokenHash: String
    package var tokenBytes: Int
    package var channel: String?
    package var apnsID: String
    package var apnsUniqueID: String?
    /// The HTTP status of the final answer; absent when none came.
    package var status: Int?
    package var reason: String?
    package var failure: String?
    package var attempts: Int
    package var milliseconds: Double
    /// accepted, unregistered, rejected, gave up, dropped.
    package var outcome: String
    /// nothing, error-response N (…), feedback list, nothing (dropped).
    package var told: String
    package var resendMatched: Bool
    /// The admin address it was read from (filled by `apns-bridge log`).
    package var instance: String?

    enum CodingKeys: String, CodingKey {
        case sequence, received, tenant, environment, command, identifier, token, channel, status, reason, failure,
            attempts, milliseconds, outcome, told, instance
        case receivedMilliseconds = "received_ms"
        case tokenHash = "token_hash"
        case tokenBytes = "token_bytes"
        case apnsID = "apns_id"
        case apnsUniqueID = "apns_unique_id"
        case resendMatched = "resend_matched"
    }

    /// `entry` as the ring holds it; `receivedMilliseconds` when its time is known already (a
    /// stored failure's), else read from its monotonic time.
    package init(_ entry: PushLogEntry, receivedMilliseconds: UInt64? = nil) {
        self.sequence = entry.sequence
        let received = receivedMilliseconds ?? PushLog.receivedMilliseconds(of: entry)
        self.received = Self.iso8601(milliseconds: received)
        self.receivedMilliseconds = received
        self.tenant = entry.tenant
        self.environment = entry.environment.rawValue
        self.command = Int(entry.command.rawValue)
        self.identifier = entry.identifier.rawValue
        self.token = entry.tokenDisplay
        self.tokenHash = entry.token.hashText
        self.tokenBytes = Int(entry.token.length)
        self.channel = entry.channel
        self.apnsID = APNsRequestID(high: entry.apnsID.high, low: entry.apnsID.low).description
        self.apnsUniqueID = entry.uniqueID
        self.status = entry.status == 0 ? nil : Int(entry.status)
        self.reason = entry.reason
        self.failure = entry.failure
        self.attempts = Int(entry.attempts)
        self.milliseconds = Double(entry.microseconds) / 1000
        self.outcome = entry.outcomeName
        self.told = entry.told
        self.resendMatched = entry.resendMatched
    }

    /// A failure as the store keeps it.
    package init(stored failure: StoredPushFailure) {
        self.init(failure.entry, receivedMilliseconds: failure.receivedMilliseconds)
    }

    /// `2026-11-29T14:02:07.123Z`.
    static func iso8601(milliseconds: UInt64) -> String {
        let date = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
        return date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}

import BridgeCore
import Crypto
import LegacyProtocol
import NIOCore

/// How a resend record's ``NotificationOutcome`` is kept in a database row: a kind and a value.
/// NULL: pending (the upstream has not answered yet).
enum StoredOutcome {
    static let accepted: Int64 = 0
    static let unregistered: Int64 = 1
    static let rejected: Int64 = 2
    /// The outcome can no longer arrive: the bridge gave up on the notification (`gaveUp`,
    /// `dropped`), or the process that forwarded it stopped or crashed with it in flight. A
    /// resend is forwarded again. (Schema 1 stored `dropped` as kind 3: read as unknown too.)
    static let unknown: Int64 = 4

    static func encode(_ outcome: NotificationOutcome) -> (kind: Int64, value: Int64) {
        switch outcome {
        case .accepted: (Self.accepted, 0)
        case .unregistered(let timestamp): (Self.unregistered, Int64(timestamp))
        case .rejected(let status): (Self.rejected, Int64(status.rawValue))
        case .gaveUp, .dropped: (Self.unknown, 0)
        }
    }

    /// What a claim of a row with this outcome answers. A kind this code does not know (a newer
    /// schema's) reads as unknown: forwarding again is at-least-once, and a failure the upstream
    /// did not give is never invented (docs/protocol.md#resend-records).
    static func claim(kind: Int64, value: Int64) -> ResendClaim {
        switch kind {
        case Self.accepted: .answered(.accepted)
        case Self.unregistered: .answered(.unregistered(timestamp: UInt32(clamping: value)))
        case Self.rejected: .answered(.rejected(ErrorResponseStatus(rawValue: UInt8(clamping: value))))
        default: .outcomeUnknown
        }
    }
}

extension ResendRecordKey {
    /// One column for the whole key: SHA-256 over the tenant, token, payload digest and
    /// priority, each variable part length-prefixed so that no two keys share an encoding.
    /// (Schema 1 hashed the identifier and expiry too; such rows simply never match again and
    /// expire with their window.)
    var storageHash: ByteBuffer {
        var hasher = SHA256()
        var bytes = ByteBuffer()
        let tenant = Array(self.tenant.utf8)
        bytes.writeInteger(UInt32(tenant.count))
        bytes.writeBytes(tenant)
        bytes.writeInteger(UInt32(self.deviceToken.readableBytes))
        bytes.writeImmutableBuffer(self.deviceToken)
        bytes.writeMultipleIntegers(
            self.payloadDigest.bytes.0,
            self.payloadDigest.bytes.1,
            self.payloadDigest.bytes.2,
            self.payloadDigest.bytes.3
        )
        bytes.writeInteger(self.priority)
        bytes.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
        return ByteBuffer(bytes: hasher.finalize())
    }
}

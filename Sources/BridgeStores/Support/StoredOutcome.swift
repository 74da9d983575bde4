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
    static func claim(kind: Int64, value: Int64, firstSentAs id: ForwardedNotification.ID?) -> ResendClaim {
        switch kind {
        case Self.accepted: .answered(.accepted)
        case Self.unregistered: .answered(.unregistered(timestamp: UInt32(clamping: value)))
        case Self.rejected: .answered(.rejected(ErrorResponseStatus(rawValue: UInt8(clamping: value))))
        default: .outcomeUnknown(firstSentAs: id)
        }
    }
}

extension ForwardedNotification.ID {
    /// A resend record's `notification_id` column: the id's 16 bytes, big-endian.
    var stored: ByteBuffer {
        var bytes = ByteBuffer()
        bytes.writeMultipleIntegers(self.high, self.low)
        return bytes
    }

    /// The id a `notification_id` column holds; `nil` for anything but 16 bytes (a row written
    /// before ids were kept holds NULL: its resend goes under a new id).
    init?(stored: ByteBuffer) {
        guard stored.readableBytes == 16,
            let (high, low) = stored.getMultipleIntegers(at: stored.readerIndex, as: (UInt64, UInt64).self)
        else { return nil }
        self.init(high: high, low: low)
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

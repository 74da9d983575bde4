import BridgeCore
import Crypto
import LegacyProtocol
import NIOCore

/// How a ``NotificationOutcome`` is kept in a database row: a kind and a value.
enum StoredOutcome {
    static let accepted: Int64 = 0
    static let unregistered: Int64 = 1
    static let rejected: Int64 = 2
    static let dropped: Int64 = 3

    static func encode(_ outcome: NotificationOutcome) -> (kind: Int64, value: Int64) {
        switch outcome {
        case .accepted: (Self.accepted, 0)
        case .unregistered(let timestamp): (Self.unregistered, Int64(timestamp))
        case .rejected(let status): (Self.rejected, Int64(status.rawValue))
        case .dropped: (Self.dropped, 0)
        }
    }

    /// An unknown kind (a newer schema's) reads as status 1: never forward blindly.
    static func decode(kind: Int64, value: Int64) -> NotificationOutcome {
        switch kind {
        case Self.accepted: .accepted
        case Self.unregistered: .unregistered(timestamp: UInt32(clamping: value))
        case Self.rejected: .rejected(ErrorResponseStatus(rawValue: UInt8(clamping: value)))
        case Self.dropped: .dropped
        default: .rejected(.processingError)
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
        bytes.writeMultipleIntegers(self.payloadDigest.bytes.0, self.payloadDigest.bytes.1, self.payloadDigest.bytes.2, self.payloadDigest.bytes.3)
        bytes.writeInteger(self.priority)
        bytes.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
        return ByteBuffer(bytes: hasher.finalize())
    }
}

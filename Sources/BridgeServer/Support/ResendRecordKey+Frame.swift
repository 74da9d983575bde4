import BridgeCore
import Crypto
import LegacyProtocol
import NIOCore

extension ResendRecordKey {
    /// The key of a notification: its tenant, token, the SHA-256 of its payload and its
    /// priority (docs/protocol.md#resend-records). Computed only after an error or a shutdown made records.
    package init(tenant: String, frame: NotificationFrame) {
        let digest = frame.payload.withUnsafeReadableBytes { SHA256.hash(data: $0) }
        let words = digest.withUnsafeBytes { raw in
            (
                raw.loadUnaligned(fromByteOffset: 0, as: UInt64.self),
                raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self),
                raw.loadUnaligned(fromByteOffset: 16, as: UInt64.self),
                raw.loadUnaligned(fromByteOffset: 24, as: UInt64.self)
            )
        }
        self.init(
            tenant: tenant,
            deviceToken: frame.deviceToken,
            payloadDigest: PayloadDigest(bytes: words),
            priority: frame.priority
        )
    }
}

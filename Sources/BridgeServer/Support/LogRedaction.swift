import NIOCore

/// Shortening for logs: a whole device token is never logged at info level.
package enum LogRedaction {
    /// The first 4 bytes in hex and the length, e.g. `1a2b3c4d…(32 B)`.
    package static func token(_ token: ByteBuffer) -> String {
        let head = token.getSlice(at: token.readerIndex, length: min(4, token.readableBytes)) ?? ByteBuffer()
        return "\(head.hexDump(format: .compact))…(\(token.readableBytes) B)"
    }
}

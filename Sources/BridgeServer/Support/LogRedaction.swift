import NIOCore

/// Shortening for logs: a whole device token is never logged at info level.
enum LogRedaction {
    /// The first 4 bytes in hex and the length, e.g. `1a2b3c4d…(32 B)`.
    static func token(_ token: ByteBuffer) -> String {
        "\(token.hexDump(format: .compact(maxBytes: 4)))…(\(token.readableBytes) B)"
    }
}

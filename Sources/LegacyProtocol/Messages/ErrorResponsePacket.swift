import NIOCore

/// The 6-byte packet the gateway writes before it closes a connection.
///
/// ```
/// +---------+--------+---------------------------+
/// | command | status | identifier                |
/// | 1 byte  | 1 byte | 4 bytes, verbatim         |
/// |   8     |        |                           |
/// +---------+--------+---------------------------+
/// ```
public struct ErrorResponsePacket: Hashable, Sendable, CustomStringConvertible {
    public static let command: UInt8 = 8
    public static let length = 6

    public var status: ErrorResponseStatus
    public var identifier: NotificationIdentifier

    public init(status: ErrorResponseStatus, identifier: NotificationIdentifier) {
        self.status = status
        self.identifier = identifier
    }

    public var description: String {
        "error-response(status: \(self.status), identifier: \(self.identifier))"
    }
}

extension ByteBuffer {
    /// Writes `08 status identifier[4]`.
    @discardableResult
    public mutating func writeErrorResponse(_ packet: ErrorResponsePacket) -> Int {
        self.writeMultipleIntegers(ErrorResponsePacket.command, packet.status.rawValue, packet.identifier.rawValue)
    }

    /// Reads one error-response packet, or returns `nil` (consuming nothing) when fewer than
    /// 6 bytes are readable or the first byte is not command 8.
    public mutating func readErrorResponse() -> ErrorResponsePacket? {
        guard
            let (command, status, identifier) = self.getMultipleIntegers(
                at: self.readerIndex,
                as: (UInt8, UInt8, UInt32).self
            ), command == ErrorResponsePacket.command
        else {
            return nil
        }
        self.moveReaderIndex(forwardBy: ErrorResponsePacket.length)
        return ErrorResponsePacket(
            status: ErrorResponseStatus(rawValue: status),
            identifier: NotificationIdentifier(rawValue: identifier)
        )
    }
}

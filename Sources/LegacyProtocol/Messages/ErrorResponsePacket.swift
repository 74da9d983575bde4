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

/// The status byte of an error-response packet (Apple's "Codes in error-response packet").
public struct ErrorResponseStatus: Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8

    public init(rawValue: UInt8) {
        self.rawValue = rawValue
    }

    /// Never sent by the bridge; kept so that a decoded packet can be described.
    public static let noErrors = ErrorResponseStatus(rawValue: 0)
    public static let processingError = ErrorResponseStatus(rawValue: 1)
    public static let missingDeviceToken = ErrorResponseStatus(rawValue: 2)
    public static let missingTopic = ErrorResponseStatus(rawValue: 3)
    public static let missingPayload = ErrorResponseStatus(rawValue: 4)
    public static let invalidTokenSize = ErrorResponseStatus(rawValue: 5)
    public static let invalidTopicSize = ErrorResponseStatus(rawValue: 6)
    public static let invalidPayloadSize = ErrorResponseStatus(rawValue: 7)
    public static let invalidToken = ErrorResponseStatus(rawValue: 8)
    /// The server closed the connection (maintenance or shutdown). The identifier names the last
    /// notification that was sent successfully; everything after it must be resent.
    public static let shutdown = ErrorResponseStatus(rawValue: 10)
    public static let protocolError = ErrorResponseStatus(rawValue: 128)
    public static let unknown = ErrorResponseStatus(rawValue: 255)

    /// The failure statuses Apple documents (every one but 0).
    public static let failures: [ErrorResponseStatus] = [
        .processingError, .missingDeviceToken, .missingTopic, .missingPayload, .invalidTokenSize, .invalidTopicSize,
        .invalidPayloadSize, .invalidToken, .shutdown, .protocolError, .unknown,
    ]

    public var description: String {
        switch self {
        case .noErrors: "0 (no errors)"
        case .processingError: "1 (processing error)"
        case .missingDeviceToken: "2 (missing device token)"
        case .missingTopic: "3 (missing topic)"
        case .missingPayload: "4 (missing payload)"
        case .invalidTokenSize: "5 (invalid token size)"
        case .invalidTopicSize: "6 (invalid topic size)"
        case .invalidPayloadSize: "7 (invalid payload size)"
        case .invalidToken: "8 (invalid token)"
        case .shutdown: "10 (shutdown)"
        case .protocolError: "128 (protocol error)"
        case .unknown: "255 (unknown)"
        default: "\(self.rawValue)"
        }
    }
}

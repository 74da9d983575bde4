/// A frame the decoder refuses: it carries the status byte of docs/protocol.md#status-codes and the identifier
/// when it could be read, so the gateway can answer with an error-response packet at once.
///
/// After such an error the stream cannot be trusted any more; the connection is closed.
public struct LegacyProtocolError: Error, Hashable, Sendable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case unknownCommand(UInt8)
        case frameTooLong(UInt32)
        case tokenTooLong(UInt16)
        case payloadTooLong(UInt16)
        case itemRunsPastFrame(itemID: UInt8, length: UInt16)
        case truncatedItemHeader
        case badItemLength(itemID: UInt8, length: UInt16)
        case badPriority(UInt8)
        case unknownItem(UInt8)
        case duplicateItem(UInt8)
    }

    private let code: Code
    /// The status to report.
    public let status: ErrorResponseStatus
    /// The identifier to report: `.zero` when it could not be read.
    public let identifier: NotificationIdentifier
    /// The command of the refused frame, when it was one the bridge knows.
    public let command: NotificationFrame.Command?

    private init(
        _ code: Code,
        status: ErrorResponseStatus,
        identifier: NotificationIdentifier,
        command: NotificationFrame.Command?
    ) {
        self.code = code
        self.status = status
        self.identifier = identifier
        self.command = command
    }

    public static func unknownCommand(_ command: UInt8) -> Self {
        Self(.unknownCommand(command), status: .protocolError, identifier: .zero, command: nil)
    }

    public static func frameTooLong(_ length: UInt32) -> Self {
        Self(.frameTooLong(length), status: .protocolError, identifier: .zero, command: .itemized)
    }

    /// Command 0 or 1 announcing a token longer than any accepted one: answered at once with
    /// status 5 rather than waiting for up to 64 KiB of token bytes.
    public static func tokenTooLong(
        _ length: UInt16,
        identifier: NotificationIdentifier,
        command: NotificationFrame.Command
    ) -> Self {
        Self(.tokenTooLong(length), status: .invalidTokenSize, identifier: identifier, command: command)
    }

    /// Command 0 or 1 announcing a payload longer than any topic accepts: answered at once
    /// with status 7, rather than waiting for bytes that cannot make a valid frame. A token
    /// length that is already wrong is reported first (2 or 5), as the local checks order them.
    public static func payloadTooLong(
        _ length: UInt16,
        tokenLength: UInt16,
        identifier: NotificationIdentifier,
        command: NotificationFrame.Command
    ) -> Self {
        let status: ErrorResponseStatus
        if tokenLength == 0 {
            status = .missingDeviceToken
        } else if tokenLength < LegacyProtocolLimits.minimumTokenLength {
            status = .invalidTokenSize
        } else {
            status = .invalidPayloadSize
        }
        return Self(.payloadTooLong(length), status: status, identifier: identifier, command: command)
    }

    static func itemRunsPastFrame(itemID: UInt8, length: UInt16) -> Self {
        Self(
            .itemRunsPastFrame(itemID: itemID, length: length),
            status: .protocolError,
            identifier: .zero,
            command: .itemized
        )
    }

    static func truncatedItemHeader() -> Self {
        Self(.truncatedItemHeader, status: .protocolError, identifier: .zero, command: .itemized)
    }

    static func badItemLength(itemID: UInt8, length: UInt16) -> Self {
        Self(
            .badItemLength(itemID: itemID, length: length),
            status: .protocolError,
            identifier: .zero,
            command: .itemized
        )
    }

    static func badPriority(_ priority: UInt8) -> Self {
        Self(.badPriority(priority), status: .protocolError, identifier: .zero, command: .itemized)
    }

    static func unknownItem(_ itemID: UInt8) -> Self {
        Self(.unknownItem(itemID), status: .protocolError, identifier: .zero, command: .itemized)
    }

    static func duplicateItem(_ itemID: UInt8) -> Self {
        Self(.duplicateItem(itemID), status: .protocolError, identifier: .zero, command: .itemized)
    }

    /// The same error, reporting `identifier` (found later in the same frame).
    func reporting(_ identifier: NotificationIdentifier) -> Self {
        Self(self.code, status: self.status, identifier: identifier, command: self.command)
    }

    public var description: String {
        let what: String
        switch self.code {
        case .unknownCommand(let command): what = "unknown command \(command)"
        case .frameTooLong(let length):
            what = "frame length \(length) over the limit of \(LegacyProtocolLimits.maximumFrameLength)"
        case .tokenTooLong(let length):
            what = "token length \(length) over the limit of \(LegacyProtocolLimits.maximumTokenLength)"
        case .payloadTooLong(let length):
            what =
                "payload length \(length) over the largest any topic accepts, \(LegacyProtocolLimits.largestAcceptedPayloadLength)"
        case .itemRunsPastFrame(let id, let length): what = "item \(id) of length \(length) runs past its frame"
        case .truncatedItemHeader: what = "item header cut off by the end of its frame"
        case .badItemLength(let id, let length): what = "item \(id) has the wrong length \(length)"
        case .badPriority(let priority): what = "priority \(priority) is not 1, 5 or 10"
        case .unknownItem(let id): what = "unknown item id \(id)"
        case .duplicateItem(let id): what = "item \(id) appears twice"
        }
        return "\(what) (status \(self.status), identifier \(self.identifier))"
    }
}

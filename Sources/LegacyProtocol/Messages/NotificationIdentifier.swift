/// The 4 opaque identifier bytes of an enhanced (command 1) or itemized (command 2) notification.
///
/// Identifiers are echoed back verbatim in error-response packets: some clients write them in
/// host byte order, so the bridge never interprets them. They are not unique either (0 is common,
/// and counters restart on every connection). The bytes are kept as they were read, big-endian,
/// in ``rawValue`` and written back the same way.
public struct NotificationIdentifier: Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt32

    public init(rawValue: UInt32) {
        self.rawValue = rawValue
    }

    /// What is reported when a frame carries no identifier (command 0, or command 2 without
    /// item 3) or when it could not be read.
    public static let zero = NotificationIdentifier(rawValue: 0)

    public var description: String {
        let hex = String(self.rawValue, radix: 16)
        return String(repeating: "0", count: 8 - hex.count) + hex
    }
}

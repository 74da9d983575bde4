import Foundation
import NIOCore

/// The JSON body APNs sends with an error status, and the debug data of its GOAWAY frames:
/// `{"reason": "BadDeviceToken"}`, with `"timestamp"` (milliseconds) for 410.
public struct APNsErrorBody: Hashable, Sendable, Decodable {
    public var reason: APNsReason?
    public var timestamp: UInt64?

    private enum CodingKeys: String, CodingKey {
        case reason
        case timestamp
    }

    public init(reason: APNsReason?, timestamp: UInt64? = nil) {
        self.reason = reason
        self.timestamp = timestamp
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.reason = try container.decodeIfPresent(String.self, forKey: .reason).map(APNsReason.init)
        // APNs sends a number; be lenient with a string.
        if let number = try? container.decodeIfPresent(UInt64.self, forKey: .timestamp) {
            self.timestamp = number
        } else if let text = try? container.decodeIfPresent(String.self, forKey: .timestamp) {
            self.timestamp = UInt64(text)
        } else {
            self.timestamp = nil
        }
    }

    /// Parses a body; an empty or malformed one gives `nil`.
    public static func parse(_ buffer: ByteBuffer) -> APNsErrorBody? {
        guard buffer.readableBytes > 0 else { return nil }
        return try? JSONDecoder().decode(APNsErrorBody.self, from: Data(buffer.readableBytesView))
    }
}

import Foundation
import NIOCore

/// The keys of a payload's `aps` dictionary, for push-type inference. Only payloads that mention
/// `content-available` get here (see `BackgroundPayloadDetector`); error bodies and GOAWAY debug
/// data are read by `APNsErrorBody`.
enum JSONScanner {
    private struct AnyKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    private struct KeySet: Decodable {
        var keys: Set<String>
        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: AnyKey.self)
            self.keys = Set(container.allKeys.map(\.stringValue))
        }
    }

    private struct Envelope: Decodable {
        var aps: KeySet?
    }

    /// The keys of the payload's `aps` dictionary, or `nil` when the payload is not a JSON
    /// object with one.
    static func apsKeys(_ payload: ByteBuffer) -> Set<String>? {
        guard let envelope = try? JSONDecoder().decode(Envelope.self, from: Data(payload.readableBytesView)) else {
            return nil
        }
        return envelope.aps?.keys
    }
}

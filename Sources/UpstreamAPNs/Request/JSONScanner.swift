import Foundation
import NIOCore

/// The little JSON the client has to read: the keys of a payload's `aps` dictionary, and the
/// body of an APNs error answer or a GOAWAY's debug data. None of it is on the hot path.
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

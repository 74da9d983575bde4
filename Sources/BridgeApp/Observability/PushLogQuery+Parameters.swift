import BridgeCore
import Foundation
import LegacyProtocol
import NIOCore

/// `/push-log`'s query parameters (docs/operations.md#did-it-go), shared by the admin port,
/// the status page's search and `apns-bridge log`.
extension PushLogQuery {
    package struct ParameterError: Error, CustomStringConvertible {
        package var description: String
    }

    /// Reads `tenant`, `token` (whole: compared by hash; 1 to 4 bytes: a prefix), `token_hash`,
    /// `identifier` (decimal, or hex with 0x), `apns_id`, `status`, `failures`, `since`
    /// (milliseconds since 1970) and `limit`. Empty values are no filter.
    package init(parameters: [(name: String, value: String)]) throws {
        self.init()
        for (name, value) in parameters where !value.isEmpty {
            let value = value.trimmingCharacters(in: .whitespaces)
            switch name {
            case "tenant":
                self.tenant = value
            case "token":
                guard let bytes = Self.hexBytes(value), !bytes.isEmpty else {
                    throw ParameterError(description: "token: expected hex digits")
                }
                if bytes.count <= 4 {
                    self.tokenPrefix = bytes
                } else {
                    self.tokenHash = PushLog.tokenHash(bytes)
                }
            case "token_hash":
                guard value.count == 16, let hash = UInt64(value, radix: 16) else {
                    throw ParameterError(description: "token_hash: expected 16 hex digits")
                }
                self.tokenHash = hash
            case "identifier":
                let number = value.lowercased().hasPrefix("0x") ? UInt32(value.dropFirst(2), radix: 16) : UInt32(value)
                guard let number else {
                    throw ParameterError(description: "identifier: expected 0 to 4294967295, or hex with 0x")
                }
                self.identifier = NotificationIdentifier(rawValue: number)
            case "apns_id":
                guard let uuid = UUID(uuidString: value) else {
                    throw ParameterError(description: "apns_id: expected a UUID")
                }
                let bytes = withUnsafeBytes(of: uuid.uuid) { Array($0) }
                let high = bytes[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                let low = bytes[8..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
                self.apnsID = ForwardedNotification.ID(high: high, low: low)
            case "status":
                guard let status = UInt16(value), status < 600 else {
                    throw ParameterError(description: "status: expected an HTTP status (0: no answer)")
                }
                self.status = status
            case "failures":
                self.failuresOnly = value == "1" || value == "true"
            case "since":
                guard let since = UInt64(value) else {
                    throw ParameterError(description: "since: expected milliseconds since 1970")
                }
                self.since = since
            case "limit":
                guard let limit = Int(value), (1...Self.maximumLimit).contains(limit) else {
                    throw ParameterError(description: "limit: expected 1 to \(Self.maximumLimit)")
                }
                self.limit = limit
            default:
                throw ParameterError(
                    description:
                        "unknown parameter \(LogLineEscaping.escaped(String(name.prefix(40)))): try tenant, token, token_hash, identifier, apns_id, status, failures, since, limit"
                )
            }
        }
    }

    /// The parameters of a request target's query (`/push-log?tenant=shop&status=410`).
    package init(uri: String) throws {
        let query = uri.split(separator: "?", maxSplits: 1).dropFirst().first.map(String.init) ?? ""
        let items = URLComponents(string: "/?" + query)?.queryItems ?? []
        try self.init(parameters: items.map { ($0.name, $0.value ?? "") })
    }

    /// `a1b2…` as bytes; `nil` unless an even number of hex digits.
    package static func hexBytes(_ text: String) -> [UInt8]? {
        var bytes = ByteBuffer()
        guard (try? bytes.writePlainHexEncodedBytes(text)) != nil else { return nil }
        return Array(bytes.readableBytesView)
    }
}

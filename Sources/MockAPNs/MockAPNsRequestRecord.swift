import NIOCore
import NIOHPACK
import Synchronization

/// One request the mock received and answered (refused, dropped and unprocessed streams are
/// counted, not recorded).
package struct MockAPNsRequestRecord: Sendable {
    package var connectionID: Int
    package var streamID: Int
    /// Lowercase hex, from the path.
    package var token: String
    package var apnsID: String?
    /// `apns-collapse-id`, and how the HPACK encoder sent it (Apple asks for indexing the first
    /// time on a connection, and no indexing after).
    package var collapseID: String?
    package var collapseIDIndexing: HPACKIndexing?
    package var topic: String?
    package var pushType: String?
    package var priority: String?
    package var expiration: String?
    package var payload: ByteBuffer
    /// `kid` and `iat` of the authentication token, when one was used.
    package var keyID: String?
    package var tokenIssuedAt: Int64?
    /// How the HPACK encoder sent `:path` and `authorization` (Apple asks for no indexing).
    package var pathIndexing: HPACKIndexing?
    package var authorizationIndexing: HPACKIndexing?
    package var status: Int
    package var reason: MockAPNsReason?
    /// Sent with 410 (milliseconds since 1970).
    package var timestamp: UInt64?
    /// Which of APNs' APIs the request was for.
    package var api: MockAPNsAPI = .device
    package var method: String?
    package var path: String?
    /// `apns-channel-id` of a broadcast or channel management request.
    package var channelID: String?
    /// `apns-request-id` of a broadcast or channel management request.
    package var requestID: String?
    /// Headers answered beyond `:status` and the request id (`apns-channel-id`, `apns-unique-id`).
    package var responseHeaders: [(name: String, value: String)] = []
    /// The JSON body of a successful channel management answer.
    package var responseBody: String?

    /// 200, or 201/204 from the channel management API.
    package var wasAccepted: Bool { (200..<300).contains(self.status) }
}

import NIOCore
import NIOHPACK
import Synchronization

/// One request the mock received and answered (refused, dropped and unprocessed streams are
/// counted, not recorded).
public struct MockAPNsRequestRecord: Sendable {
    public var connectionID: Int
    public var streamID: Int
    /// Lowercase hex, from the path.
    public var token: String
    public var apnsID: String?
    /// `apns-collapse-id`, and how the HPACK encoder sent it (Apple asks for indexing the first
    /// time on a connection, and no indexing after).
    public var collapseID: String?
    public var collapseIDIndexing: HPACKIndexing?
    public var topic: String?
    public var pushType: String?
    public var priority: String?
    public var expiration: String?
    public var payload: ByteBuffer
    /// `kid` and `iat` of the provider token, when one was used.
    public var keyID: String?
    public var tokenIssuedAt: Int64?
    /// How the HPACK encoder sent `:path` and `authorization` (Apple asks for no indexing).
    public var pathIndexing: HPACKIndexing?
    public var authorizationIndexing: HPACKIndexing?
    public var status: Int
    public var reason: MockAPNsReason?
    /// Sent with 410 (milliseconds since 1970).
    public var timestamp: UInt64?
    /// Which of APNs' APIs the request was for.
    public var api: MockAPNsAPI = .device
    public var method: String?
    public var path: String?
    /// `apns-channel-id` of a broadcast or channel management request.
    public var channelID: String?
    /// `apns-request-id` of a broadcast or channel management request.
    public var requestID: String?
    /// Headers answered beyond `:status` and the request id (`apns-channel-id`, `apns-unique-id`).
    public var responseHeaders: [(name: String, value: String)] = []
    /// The JSON body of a successful channel management answer.
    public var responseBody: String?

    /// 200, or 201/204 from the channel management API.
    public var wasAccepted: Bool { (200..<300).contains(self.status) }
}

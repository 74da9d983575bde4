import Foundation
import NIOCore
import NIOHPACK
import Synchronization

/// The Live Activity channels a ``MockAPNsServer`` knows, per bundle id: made by its channel
/// management API (or by a test directly), used by its broadcast API.
package final class MockAPNsChannels: Sendable {
    /// Apple's limit per app and environment (`CannotCreateChannelConfig` beyond it).
    package static let limitPerApp = 10_000

    private struct Channel {
        var id: String
        /// 0: no message stored; 1: the most recent message stored.
        var storagePolicy: Int
    }

    private let channels = Mutex<[String: [Channel]]>([:])

    package init() {}

    /// Creates a channel and returns its id (16 random bytes, base64), or `nil` when the app
    /// already has ``limitPerApp``.
    package func create(bundleID: String, storagePolicy: Int) -> String? {
        var bytes = [UInt8](repeating: 0, count: 16)
        var generator = SystemRandomNumberGenerator()
        for index in bytes.indices { bytes[index] = generator.next() }
        let id = Data(bytes).base64EncodedString()
        return self.channels.withLock { channels in
            guard channels[bundleID, default: []].count < Self.limitPerApp else { return nil }
            channels[bundleID, default: []].append(Channel(id: id, storagePolicy: storagePolicy))
            return id
        }
    }

    /// The storage policy of a channel, or `nil` when the app has no such channel.
    package func storagePolicy(of id: String, bundleID: String) -> Int? {
        self.channels.withLock { $0[bundleID]?.first { $0.id == id }?.storagePolicy }
    }

    /// Deletes a channel; returns whether it existed.
    @discardableResult
    package func delete(_ id: String, bundleID: String) -> Bool {
        self.channels.withLock { channels in
            guard let index = channels[bundleID]?.firstIndex(where: { $0.id == id }) else { return false }
            channels[bundleID]!.remove(at: index)
            return true
        }
    }

    /// The ids of an app's channels, oldest first.
    package func ids(bundleID: String) -> [String] {
        self.channels.withLock { $0[bundleID]?.map(\.id) ?? [] }
    }
}

/// What the mock answers to a broadcast or channel management request.
struct MockAPNsAnswer {
    var status: Int
    var reason: MockAPNsReason?
    /// Extra response headers (`apns-channel-id`, `apns-unique-id`).
    var headers: [(String, String)] = []
    /// A JSON body of a successful answer.
    var body: String?
    /// The channel the request named.
    var channelID: String?
    var claims: AuthenticationTokenVerifier.Claims?
}

/// The broadcast push API (`POST /4/broadcasts/apps/<bundle id>`) and the channel management API
/// (`/1/apps/<bundle id>/channels`, `/all-channels`), validated in the order of Apple's broadcast
/// error table: method and path, credentials, the app, then headers, then the payload.
struct MockAPNsBroadcastAPI {
    let validator: MockAPNsRequestValidator
    let channels: MockAPNsChannels

    static let broadcastPrefix = "/4/broadcasts/apps/"
    static let managementPrefix = "/1/apps/"

    func broadcast(headers: HPACKHeaders, body: ByteBuffer, hasClientCertificate: Bool, now: Date) -> MockAPNsAnswer {
        if Self.repeatsAny(
            of: [
                "apns-request-id", "apns-channel-id", "apns-priority", "apns-expiration", "apns-push-type",
                "authorization",
            ],
            headers
        ) {
            return refuse(400, .duplicateHeaders)
        }
        guard headers.first(name: ":method") == "POST" else { return refuse(405, .methodNotAllowed) }
        let path = headers.first(name: ":path") ?? ""
        let bundleID = String(path.dropFirst(Self.broadcastPrefix.count))
        guard !bundleID.isEmpty, !bundleID.contains("/") else { return refuse(404, .badPath) }
        let claims: AuthenticationTokenVerifier.Claims?
        switch self.admit(headers, bundleID: bundleID, hasClientCertificate: hasClientCertificate, now: now) {
        case .success(let verified): claims = verified
        case .failure(let refused): return refused
        }
        let channelID: String
        switch self.channel(in: headers, bundleID: bundleID) {
        case .success(let id): channelID = id
        case .failure(let refused): return refused
        }
        guard let pushType = headers.first(name: "apns-push-type") else {
            return refuse(400, .missingPushType, channelID: channelID)
        }
        guard pushType.lowercased() == "liveactivity" else {
            return refuse(400, .invalidPushType, channelID: channelID)
        }
        guard let expirationText = headers.first(name: "apns-expiration"), let expiration = Int64(expirationText),
            expiration >= 0
        else {
            return refuse(400, .badExpirationDate, channelID: channelID)
        }
        if expiration != 0, self.channels.storagePolicy(of: channelID, bundleID: bundleID) == 0 {
            return refuse(400, .badExpirationDate, channelID: channelID)
        }
        guard let priority = headers.first(name: "apns-priority"), ["10", "5", "1"].contains(priority) else {
            return refuse(400, .badPriority, channelID: channelID)
        }
        guard body.readableBytes > 0 else { return refuse(400, .payloadEmpty, channelID: channelID) }
        guard body.readableBytes <= 5120 else { return refuse(413, .payloadTooLarge, channelID: channelID) }
        return MockAPNsAnswer(
            status: 200,
            headers: [("apns-unique-id", UUID().uuidString.lowercased())],
            channelID: channelID,
            claims: claims
        )
    }

    func manage(headers: HPACKHeaders, body: ByteBuffer, hasClientCertificate: Bool, now: Date) -> MockAPNsAnswer {
        if Self.repeatsAny(of: ["apns-request-id", "apns-channel-id", "authorization"], headers) {
            return refuse(400, .duplicateHeaders)
        }
        let method = headers.first(name: ":method") ?? ""
        let parts = (headers.first(name: ":path") ?? "").dropFirst(Self.managementPrefix.count).split(
            separator: "/",
            omittingEmptySubsequences: false
        )
        guard parts.count == 2, !parts[0].isEmpty, parts[1] == "channels" || parts[1] == "all-channels" else {
            return refuse(404, .badPath)
        }
        let bundleID = String(parts[0])
        let allowed = parts[1] == "channels" ? ["POST", "GET", "DELETE"] : ["GET"]
        guard allowed.contains(method) else { return refuse(405, .methodNotAllowed) }
        let claims: AuthenticationTokenVerifier.Claims?
        switch self.admit(headers, bundleID: bundleID, hasClientCertificate: hasClientCertificate, now: now) {
        case .success(let verified): claims = verified
        case .failure(let refused): return refused
        }
        var answer: MockAPNsAnswer
        switch (method, parts[1]) {
        case ("GET", "all-channels"):
            let list = self.channels.ids(bundleID: bundleID)
            answer = MockAPNsAnswer(status: 200, body: Self.json(["channels": list]))
        case ("POST", _):
            guard body.readableBytes > 0 else { return refuse(400, .payloadEmpty) }
            guard let object = try? JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any]
            else {
                return refuse(400, .badRequestPayload)
            }
            guard Set(object.keys).isSubset(of: ["message-storage-policy", "push-type"]) else {
                return refuse(400, .badRequestParams)
            }
            guard let pushType = object["push-type"] as? String else { return refuse(400, .missingPushType) }
            guard pushType.lowercased() == "liveactivity" else { return refuse(400, .invalidPushType) }
            let policy = object["message-storage-policy"] as? Int ?? 0
            guard policy == 0 || policy == 1 else { return refuse(400, .badRequestParams) }
            guard let id = self.channels.create(bundleID: bundleID, storagePolicy: policy) else {
                return refuse(400, .cannotCreateChannelConfig)
            }
            answer = MockAPNsAnswer(status: 201, headers: [("apns-channel-id", id)], channelID: id)
        default:
            let channelID: String
            switch self.channel(in: headers, bundleID: bundleID) {
            case .success(let id): channelID = id
            case .failure(let refused): return refused
            }
            if method == "DELETE" {
                self.channels.delete(channelID, bundleID: bundleID)
                answer = MockAPNsAnswer(status: 204, channelID: channelID)
            } else {
                let policy = self.channels.storagePolicy(of: channelID, bundleID: bundleID) ?? 0
                answer = MockAPNsAnswer(
                    status: 200,
                    body: Self.json(["message-storage-policy": policy, "push-type": "LiveActivity"]),
                    channelID: channelID
                )
            }
        }
        answer.claims = claims
        return answer
    }

    private func refuse(_ status: Int, _ reason: MockAPNsReason, channelID: String? = nil) -> MockAPNsAnswer {
        MockAPNsAnswer(status: status, reason: reason, channelID: channelID)
    }

    private static func repeatsAny(of names: [String], _ headers: HPACKHeaders) -> Bool {
        names.contains { headers[$0].count > 1 }
    }

    /// What both APIs check after the method and path, in Apple's order: the credentials, the
    /// app, the request id.
    private func admit(
        _ headers: HPACKHeaders,
        bundleID: String,
        hasClientCertificate: Bool,
        now: Date
    ) -> Result<AuthenticationTokenVerifier.Claims?, MockAPNsAnswer> {
        let claims: AuthenticationTokenVerifier.Claims?
        switch self.validator.authenticate(headers: headers, hasClientCertificate: hasClientCertificate, now: now) {
        case .success(let verified): claims = verified
        case .failure(let refused): return .failure(self.refuse(refused.status, refused.reason))
        }
        if let refused = self.checkApp(bundleID) { return .failure(refused) }
        if let requestID = headers.first(name: "apns-request-id"), !MockAPNsRequestValidator.isUUID(requestID) {
            return .failure(self.refuse(400, .badMessageId))
        }
        return .success(claims)
    }

    /// The topics the mock accepts, and no push-type suffix on a bundle id.
    private func checkApp(_ bundleID: String) -> MockAPNsAnswer? {
        if bundleID.contains(".push-type.") || bundleID.hasSuffix(".voip") || bundleID.hasSuffix(".complication") {
            return MockAPNsAnswer(status: 400, reason: .topicDisallowed)
        }
        if let topics = self.validator.topics, !topics.contains(bundleID) {
            return MockAPNsAnswer(status: 400, reason: .topicDisallowed)
        }
        return nil
    }

    /// `apns-channel-id`: present, base64, and a channel of this app.
    private func channel(in headers: HPACKHeaders, bundleID: String) -> Result<String, MockAPNsAnswer> {
        guard let id = headers.first(name: "apns-channel-id"), !id.isEmpty else {
            return .failure(MockAPNsAnswer(status: 400, reason: .missingChannelId))
        }
        guard id.utf8.count <= 256, Data(base64Encoded: id) != nil else {
            return .failure(MockAPNsAnswer(status: 400, reason: .badChannelId, channelID: id))
        }
        guard self.channels.storagePolicy(of: id, bundleID: bundleID) != nil else {
            return .failure(MockAPNsAnswer(status: 400, reason: .channelNotRegistered, channelID: id))
        }
        return .success(id)
    }

    private static func json(_ object: [String: Any]) -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else {
            return "{}"
        }
        return String(decoding: data, as: UTF8.self)
    }
}

extension MockAPNsAnswer: Error {}

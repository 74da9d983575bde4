import Foundation
import NIOCore
import NIOHPACK

/// Validates one request as APNs does (Apple's "Handling notification responses from APNs"
/// table), in the order APNs reports problems: method and path, credentials, then headers,
/// then the payload.
struct MockAPNsRequestValidator {
    struct Accepted {
        var token: String
        var claims: ProviderTokenVerifier.Claims?
    }

    struct Refused: Error {
        var status: Int
        var reason: MockAPNsReason
        var token: String?
    }

    let verifier: ProviderTokenVerifier
    let topics: Set<String>?
    let providerTokenMaximumAge: TimeInterval

    func validate(
        headers: HPACKHeaders,
        body: ByteBuffer,
        hasClientCertificate: Bool,
        now: Date
    ) -> Result<Accepted, Refused> {
        func refuse(_ status: Int, _ reason: MockAPNsReason, _ token: String? = nil) -> Result<Accepted, Refused> {
            .failure(Refused(status: status, reason: reason, token: token))
        }
        for name in [
            "apns-id", "apns-topic", "apns-priority", "apns-expiration", "apns-push-type", "apns-collapse-id",
            "authorization",
        ]
        where headers[name].count > 1 {
            return refuse(400, .duplicateHeaders)
        }
        guard headers.first(name: ":method") == "POST" else { return refuse(405, .methodNotAllowed) }
        guard let path = headers.first(name: ":path"), path.hasPrefix("/3/device/") else {
            return refuse(404, .badPath)
        }
        let token = String(path.dropFirst("/3/device/".count)).lowercased()
        guard token.count >= 32, token.count <= 200, token.count % 2 == 0, token.allSatisfy(\.isHexDigit) else {
            return refuse(400, .badDeviceToken, token)
        }

        let claims: ProviderTokenVerifier.Claims?
        switch self.authenticate(headers: headers, hasClientCertificate: hasClientCertificate, now: now) {
        case .success(let verified): claims = verified
        case .failure(let refused): return refuse(refused.status, refused.reason, token)
        }

        guard let topic = headers.first(name: "apns-topic") else { return refuse(400, .missingTopic, token) }
        if let topics = self.topics, !topics.contains(topic) { return refuse(400, .topicDisallowed, token) }
        if let apnsID = headers.first(name: "apns-id"), !Self.isUUID(apnsID) {
            return refuse(400, .badMessageId, token)
        }
        if let expiration = headers.first(name: "apns-expiration"), Int64(expiration) == nil {
            return refuse(400, .badExpirationDate, token)
        }
        guard let pushType = headers.first(name: "apns-push-type") else { return refuse(400, .missingPushType, token) }
        guard Self.pushTypes.contains(pushType) else { return refuse(400, .invalidPushType, token) }
        if let priority = headers.first(name: "apns-priority") {
            guard ["10", "5", "1"].contains(priority) else { return refuse(400, .badPriority, token) }
            if pushType == "background", priority == "10" { return refuse(400, .badPriority, token) }
        }
        guard body.readableBytes > 0 else { return refuse(400, .payloadEmpty, token) }
        let limit = pushType == "voip" ? 5120 : 4096
        guard body.readableBytes <= limit else { return refuse(413, .payloadTooLarge, token) }
        return .success(Accepted(token: token, claims: claims))
    }

    /// A provider token, or a client certificate: the check every API of APNs makes first.
    func authenticate(
        headers: HPACKHeaders,
        hasClientCertificate: Bool,
        now: Date
    ) -> Result<ProviderTokenVerifier.Claims?, Refused> {
        if let authorization = headers.first(name: "authorization") {
            guard authorization.hasPrefix("bearer ") else {
                return .failure(Refused(status: 403, reason: .invalidProviderToken))
            }
            switch self.verifier.verify(
                String(authorization.dropFirst(7)),
                now: now,
                maximumAge: self.providerTokenMaximumAge
            ) {
            case .valid(let verified): return .success(verified)
            case .invalid(let reason): return .failure(Refused(status: 403, reason: reason))
            }
        } else if !hasClientCertificate {
            return .failure(Refused(status: 403, reason: .missingProviderToken))
        }
        return .success(nil)
    }

    /// The `apns-push-type` values Apple documents.
    static let pushTypes: Set<String> = [
        "alert", "background", "location", "voip", "complication", "fileprovider", "mdm", "liveactivity", "pushtotalk",
        "widgets",
    ]

    /// 8-4-4-4-12 hexadecimal digits.
    static func isUUID(_ value: String) -> Bool {
        let groups = value.split(separator: "-", omittingEmptySubsequences: false)
        guard groups.map(\.count) == [8, 4, 4, 4, 12] else { return false }
        return groups.allSatisfy { $0.allSatisfy(\.isHexDigit) }
    }
}

import Foundation
import NIOCore
import NIOHPACK

/// Validates one request as APNs does (Apple's "Handling notification responses from APNs"
/// table), in the order APNs reports problems: method and path, credentials, then headers,
/// then the payload.
struct MockAPNsRequestValidator {
    struct Accepted {
        var token: String
        var claims: AuthenticationTokenVerifier.Claims?
    }

    struct Refused: Error {
        var status: Int
        var reason: MockAPNsReason
        var token: String?
    }

    let verifier: AuthenticationTokenVerifier
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
        // One pass over the headers: a repeated APNs header is refused before anything else.
        var seen: UInt8 = 0
        for header in headers {
            guard let bit = Self.singleHeaderBits[header.name] else { continue }
            if seen & bit != 0 { return refuse(400, .duplicateHeaders) }
            seen |= bit
        }
        guard headers.first(name: ":method") == "POST" else { return refuse(405, .methodNotAllowed) }
        guard let path = headers.first(name: ":path"), path.hasPrefix("/3/device/") else {
            return refuse(404, .badPath)
        }
        let tokenBytes = path.utf8.dropFirst("/3/device/".utf8.count)
        guard (32...200).contains(tokenBytes.count), tokenBytes.count % 2 == 0, tokenBytes.allSatisfy(Self.isHexDigit)
        else {
            return refuse(400, .badDeviceToken, String(path.dropFirst("/3/device/".count)).lowercased())
        }
        let token = String(unsafeUninitializedCapacity: tokenBytes.count) { output in
            _ = output.initialize(from: tokenBytes.lazy.map(Self.lowercased))
            return tokenBytes.count
        }

        let claims: AuthenticationTokenVerifier.Claims?
        switch self.authenticate(headers: headers, hasClientCertificate: hasClientCertificate, now: now) {
        case .success(let verified): claims = verified
        case .failure(let refused): return refuse(refused.status, refused.reason, token)
        }

        guard let topic = headers.first(name: "apns-topic") else { return refuse(400, .missingTopic, token) }
        if let topics = self.topics, !topics.contains(topic) { return refuse(400, .topicDisallowed, token) }
        if let apnsID = headers.first(name: "apns-id"), !Self.isUUID(apnsID) {
            return refuse(400, .badMessageId, token)
        }
        if let collapseID = headers.first(name: "apns-collapse-id"), collapseID.utf8.count > 64 {
            return refuse(400, .badCollapseId, token)
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

    /// A authentication token, or a client certificate: the check every API of APNs makes first.
    func authenticate(
        headers: HPACKHeaders,
        hasClientCertificate: Bool,
        now: Date
    ) -> Result<AuthenticationTokenVerifier.Claims?, Refused> {
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

    /// The headers APNs refuses to see twice, each with its bit.
    private static let singleHeaderBits: [String: UInt8] = [
        "apns-id": 1 << 0, "apns-topic": 1 << 1, "apns-priority": 1 << 2, "apns-expiration": 1 << 3,
        "apns-push-type": 1 << 4, "apns-collapse-id": 1 << 5, "authorization": 1 << 6,
    ]

    /// 8-4-4-4-12 hexadecimal digits (ASCII).
    static func isUUID(_ value: String) -> Bool {
        var count = 0
        for byte in value.utf8 {
            switch count {
            case 8, 13, 18, 23: guard byte == UInt8(ascii: "-") else { return false }
            default: guard Self.isHexDigit(byte) else { return false }
            }
            count += 1
        }
        return count == 36
    }

    static func isHexDigit(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"),
            UInt8(ascii: "A")...UInt8(ascii: "F"):
            return true
        default:
            return false
        }
    }

    private static func lowercased(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte | 0x20 : byte
    }
}

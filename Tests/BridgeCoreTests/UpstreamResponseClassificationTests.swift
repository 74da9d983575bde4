import BridgeCore
import LegacyProtocol
import NIOCore
import Testing

/// CONTRACT §1.7: each APNs answer maps to one legacy behaviour.
@Suite("Upstream response classification")
struct UpstreamResponseClassificationTests {
    struct Row: Sendable, CustomTestStringConvertible {
        var status: Int
        var reason: String?
        var expected: UpstreamResponseClassification
        var testDescription: String { "\(self.status) \(self.reason ?? "-")" }
    }

    static let rows: [Row] = [
        Row(status: 200, reason: nil, expected: .final(.accepted)),
        Row(status: 410, reason: "Unregistered", expected: .final(.unregistered(timestamp: 1_700_000_000))),
        Row(status: 410, reason: "ExpiredToken", expected: .final(.unregistered(timestamp: 1_700_000_000))),
        Row(status: 400, reason: "BadDeviceToken", expected: .final(.rejected(.invalidToken))),
        Row(status: 400, reason: "DeviceTokenNotForTopic", expected: .final(.rejected(.invalidToken))),
        Row(status: 400, reason: "MissingDeviceToken", expected: .final(.rejected(.missingDeviceToken))),
        Row(status: 400, reason: "MissingTopic", expected: .topicFailure),
        Row(status: 400, reason: "BadTopic", expected: .topicFailure),
        Row(status: 400, reason: "TopicDisallowed", expected: .topicFailure),
        Row(status: 400, reason: "PayloadEmpty", expected: .final(.rejected(.missingPayload))),
        Row(status: 413, reason: "PayloadTooLarge", expected: .final(.rejected(.invalidPayloadSize))),
        Row(status: 403, reason: "ExpiredProviderToken", expected: .refreshCredentialsAndRetry),
        Row(status: 429, reason: "TooManyProviderTokenUpdates", expected: .refreshCredentialsAndRetry),
        Row(status: 400, reason: "IdleTimeout", expected: .refreshCredentialsAndRetry),
        Row(status: 429, reason: "TooManyRequests", expected: .retry(exhausted: .dropped)),
        Row(status: 500, reason: "InternalServerError", expected: .retry(exhausted: .rejected(.processingError))),
        Row(status: 503, reason: "ServiceUnavailable", expected: .retry(exhausted: .rejected(.processingError))),
        Row(status: 503, reason: "Shutdown", expected: .retry(exhausted: .rejected(.processingError))),
        Row(status: 403, reason: "BadCertificate", expected: .credentialFailure),
        Row(status: 403, reason: "BadCertificateEnvironment", expected: .credentialFailure),
        Row(status: 403, reason: "Forbidden", expected: .credentialFailure),
        Row(status: 403, reason: "InvalidProviderToken", expected: .credentialFailure),
        Row(status: 403, reason: "MissingProviderToken", expected: .credentialFailure),
        Row(status: 403, reason: "UnrelatedKeyIdInToken", expected: .credentialFailure),
        Row(status: 403, reason: "BadEnvironmentKeyIdInToken", expected: .credentialFailure),
        Row(status: 400, reason: "BadPriority", expected: .bridgeBug),
        Row(status: 400, reason: "BadExpirationDate", expected: .bridgeBug),
        Row(status: 400, reason: "BadMessageId", expected: .bridgeBug),
        Row(status: 400, reason: "BadCollapseId", expected: .bridgeBug),
        Row(status: 400, reason: "DuplicateHeaders", expected: .bridgeBug),
        Row(status: 400, reason: "InvalidPushType", expected: .bridgeBug),
        Row(status: 400, reason: "MissingPushType", expected: .bridgeBug),
        Row(status: 404, reason: "BadPath", expected: .bridgeBug),
        Row(status: 405, reason: "MethodNotAllowed", expected: .bridgeBug),
        Row(status: 400, reason: "SomethingNew", expected: .bridgeBug),
        Row(status: 502, reason: "SomethingNew", expected: .retry(exhausted: .rejected(.processingError))),
    ]

    @Test("Each APNs answer maps as the contract says", arguments: rows)
    func mapping(_ row: Row) {
        let classification = UpstreamResponseClassification(
            status: row.status,
            reason: row.reason.map(APNsReason.init),
            timestamp: 1_700_000_000_123
        )
        #expect(classification == row.expected)
    }

    @Test("Without a retry, each class reaches the provider as its legacy status")
    func outcomesWithoutRetry() {
        #expect(UpstreamResponseClassification.credentialFailure.outcomeWithoutRetry == .rejected(.processingError))
        #expect(UpstreamResponseClassification.topicFailure.outcomeWithoutRetry == .rejected(.missingTopic))
        #expect(UpstreamResponseClassification.bridgeBug.outcomeWithoutRetry == .rejected(.unknown))
        #expect(UpstreamResponseClassification.retry(exhausted: .dropped).outcomeWithoutRetry == .dropped)
    }

    @Test("The request path is /3/device/ and the token in lowercase hex")
    func path() {
        let frame = NotificationFrame(command: .simple, deviceToken: ByteBuffer(bytes: [0xAB, 0x01] + [UInt8](repeating: 0xFF, count: 30)), payload: ByteBuffer(string: "{}"))
        let notification = UpstreamNotification(tenant: Tenant(name: "a", topic: "a", environment: .production), frame: frame)
        #expect(notification.path == "/3/device/ab01" + String(repeating: "ff", count: 30))
    }
}

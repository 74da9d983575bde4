import BridgeCore
import BridgeForwarding
import Foundation
import LegacyProtocol
import NIOCore
import Testing
import UpstreamAPNs

/// docs/upstream.md#outcomes: each final APNs answer maps to one legacy behaviour. (Which answers the client
/// retries first is the retry state machine's business: `RequestRetryStateMachineTests`.)
@Suite("Legacy outcome of the client's final result")
struct LegacyOutcomeMappingTests {
    struct Row: Sendable, CustomTestStringConvertible {
        var status: Int
        var reason: String?
        var expected: LegacyOutcomeMapping
        var testDescription: String { "\(self.status) \(self.reason ?? "-")" }
    }

    static let rows: [Row] = [
        Row(status: 200, reason: nil, expected: .outcome(.accepted)),
        Row(status: 410, reason: "Unregistered", expected: .outcome(.unregistered(timestamp: 1_700_000_000))),
        Row(status: 410, reason: "ExpiredToken", expected: .outcome(.unregistered(timestamp: 1_700_000_000))),
        Row(status: 400, reason: "BadDeviceToken", expected: .outcome(.rejected(.invalidToken))),
        Row(status: 400, reason: "DeviceTokenNotForTopic", expected: .outcome(.rejected(.invalidToken))),
        Row(status: 400, reason: "MissingDeviceToken", expected: .outcome(.rejected(.missingDeviceToken))),
        Row(status: 400, reason: "MissingTopic", expected: .topicFailure),
        Row(status: 400, reason: "BadTopic", expected: .topicFailure),
        Row(status: 400, reason: "TopicDisallowed", expected: .topicFailure),
        Row(status: 400, reason: "PayloadEmpty", expected: .outcome(.rejected(.missingPayload))),
        Row(status: 413, reason: "PayloadTooLarge", expected: .outcome(.rejected(.invalidPayloadSize))),
        Row(status: 403, reason: "ExpiredProviderToken", expected: .credentialFailure),
        Row(status: 429, reason: "TooManyProviderTokenUpdates", expected: .credentialFailure),
        Row(status: 400, reason: "IdleTimeout", expected: .gaveUp),
        Row(status: 429, reason: "TooManyRequests", expected: .throttled),
        Row(status: 500, reason: "InternalServerError", expected: .gaveUp),
        Row(status: 503, reason: "ServiceUnavailable", expected: .gaveUp),
        Row(status: 503, reason: "Shutdown", expected: .gaveUp),
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
        // A reason or status Apple does not document is the upstream's behaviour, not a bug.
        Row(status: 400, reason: "SomethingNew", expected: .upstreamFault),
        Row(status: 400, reason: nil, expected: .upstreamFault),
        Row(status: 418, reason: nil, expected: .upstreamFault),
        Row(status: 502, reason: "SomethingNew", expected: .gaveUp),
    ]

    @Test("Each APNs answer maps as docs/upstream.md#outcomes says", arguments: rows)
    func mapping(_ row: Row) {
        let response = APNsResponse(
            status: row.status,
            apnsID: nil,
            reason: row.reason.map(APNsReason.init),
            timestamp: 1_700_000_000_123
        )
        #expect(LegacyOutcomeMapping(.answered(response)) == row.expected)
    }

    @Test("Each kind reaches the provider as its legacy status")
    func outcomes() {
        #expect(LegacyOutcomeMapping.credentialFailure.outcome == .rejected(.processingError))
        #expect(LegacyOutcomeMapping.topicFailure.outcome == .rejected(.missingTopic))
        #expect(LegacyOutcomeMapping.bridgeBug.outcome == .rejected(.unknown))
        #expect(LegacyOutcomeMapping.upstreamFault.outcome == .rejected(.unknown))
        #expect(LegacyOutcomeMapping.throttled.outcome == .dropped)
    }

    @Test(
        "No final answer: dropped when APNs last said 429, status 1 otherwise; an unsignable token is a credential failure"
    )
    func unanswered() {
        let budget = APNsSendFailure(kind: .retryBudgetExhausted, detail: "test")
        #expect(LegacyOutcomeMapping(.unanswered(budget, lastResponse: nil)) == .gaveUp)
        #expect(
            LegacyOutcomeMapping(
                .unanswered(budget, lastResponse: APNsResponse(status: 429, apnsID: nil, reason: .tooManyRequests))
            ) == .throttled
        )
        #expect(
            LegacyOutcomeMapping(.unanswered(budget, lastResponse: APNsResponse(status: 503, apnsID: nil)))
                == .gaveUp
        )
        let unsigned = APNsSendFailure(kind: .cannotSignAuthenticationToken, detail: "test")
        #expect(LegacyOutcomeMapping(.unanswered(unsigned, lastResponse: nil)) == .credentialFailure)
        let reset = APNsSendFailure(kind: .refusedByServer, detail: "PROTOCOL_ERROR")
        #expect(
            LegacyOutcomeMapping(.unanswered(reset, lastResponse: nil)) == .upstreamFault,
            "a server's PROTOCOL_ERROR is its word, not a bridge bug"
        )
    }

    @Test(
        "A legacy notification's request: /3/device/ and the token in lowercase hex, the tenant's topic, background at priority 5"
    )
    func request() {
        let token = ByteBuffer(bytes: [0xAB, 0x01] + [UInt8](repeating: 0xFF, count: 30))
        let tenant = Tenant(name: "a", topic: "com.example.a", environment: .production)
        let alert = ForwardedNotification(
            tenant: tenant,
            frame: NotificationFrame(
                command: .simple,
                deviceToken: token,
                payload: ByteBuffer(string: #"{"aps":{"alert":"hi"}}"#)
            )
        )
        let request = APNsForwarder.request(for: alert)
        #expect(request.path == "/3/device/ab01" + String(repeating: "ff", count: 30))
        #expect(request.topic == "com.example.a")
        #expect(request.apnsID == APNsRequestID(high: alert.id.high, low: alert.id.low).description)
        #expect(request.pushType == .alert && request.priority == 10)
        let background = ForwardedNotification(
            tenant: tenant,
            frame: NotificationFrame(
                command: .itemized,
                identifier: NotificationIdentifier(rawValue: 1),
                expiration: 7,
                priority: 10,
                deviceToken: token,
                payload: ByteBuffer(string: #"{"aps":{"content-available":1}}"#)
            )
        )
        let backgroundRequest = APNsForwarder.request(for: background)
        #expect(
            backgroundRequest.pushType == .background && backgroundRequest.priority == 5
                && backgroundRequest.expiration == 7
        )
    }

    @Test("A notification's id, as sent: a lowercase UUID of version 4 layout, unique in the process")
    func notificationIDs() {
        var seen = Set<String>()
        for _ in 0..<10_000 {
            let id = ForwardedNotification.ID.next()
            let text = APNsRequestID(high: id.high, low: id.low).description
            #expect(UUID(uuidString: text) != nil && text == text.lowercased())
            let groups = text.split(separator: "-")
            #expect(groups[2].first == "4")
            #expect("89ab".contains(groups[3].first!))
            seen.insert(text)
        }
        #expect(seen.count == 10_000)
    }
}

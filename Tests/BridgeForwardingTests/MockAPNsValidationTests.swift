import BridgeTestSupport
import DevelopmentPKI
import Foundation
import MockAPNs
import NIOSSL
import Testing

/// MockAPNs refuses what APNs refuses, checked with a client that is not ours: nghttp (nghttp2's
/// command-line client) sends requests our client never would, with the provider's client
/// certificate unless a case says otherwise.
@Suite("MockAPNs: requests APNs refuses, sent by nghttp")
struct MockAPNsValidationTests {
    struct Case: Sendable {
        var name: String
        var path: String = "/3/device/" + String(repeating: "AB", count: 32)
        var headers: [String] = MockAPNsValidationTests.alert
        /// nil sends a GET; otherwise a POST with this body.
        var body: String? = #"{"aps":{"alert":"hi"}}"#
        /// Whether nghttp presents the provider's client certificate.
        var certificate = true
        var status: Int
        var reason: MockAPNsReason?
    }

    static let uuid = "0a1b2c3d-4e5f-6789-abcd-ef0123456789"
    /// The headers of a valid alert, without an `apns-id`.
    static let alert = ["apns-topic: \(topic)", "apns-push-type: alert"]
    static let cases: [Case] = [
        Case(
            name: "a valid request",
            headers: alert + ["apns-id: \(uuid)"],
            status: 200
        ),
        Case(
            name: "apns-topic twice",
            headers: ["apns-topic: \(topic)", "apns-topic: \(topic)", "apns-push-type: alert"],
            status: 400,
            reason: .duplicateHeaders
        ),
        Case(name: "a GET", body: nil, status: 405, reason: .methodNotAllowed),
        Case(
            name: "not /3/device/",
            path: "/3/devices/" + String(repeating: "ab", count: 32),
            status: 404,
            reason: .badPath
        ),
        Case(
            name: "a token of 30 digits",
            path: "/3/device/" + String(repeating: "ab", count: 15),
            status: 400,
            reason: .badDeviceToken
        ),
        Case(
            name: "a token of an odd length",
            path: "/3/device/" + String(repeating: "ab", count: 32) + "a",
            status: 400,
            reason: .badDeviceToken
        ),
        Case(
            name: "a token with a non-hex digit",
            path: "/3/device/" + String(repeating: "ab", count: 31) + "ag",
            status: 400,
            reason: .badDeviceToken
        ),
        Case(
            name: "a token of 202 digits",
            path: "/3/device/" + String(repeating: "ab", count: 101),
            status: 400,
            reason: .badDeviceToken
        ),
        Case(
            name: "no client certificate and no authentication token",
            certificate: false,
            status: 403,
            reason: .missingProviderToken
        ),
        Case(
            name: "a authentication token that is not a JWT",
            headers: alert + ["authorization: bearer not.a.jwt"],
            certificate: false,
            status: 403,
            reason: .invalidProviderToken
        ),
        Case(name: "no apns-topic", headers: ["apns-push-type: alert"], status: 400, reason: .missingTopic),
        Case(
            name: "another topic",
            headers: ["apns-topic: com.example.other", "apns-push-type: alert"],
            status: 400,
            reason: .topicDisallowed
        ),
        Case(
            name: "an apns-id that is not a UUID",
            headers: alert + ["apns-id: 0a1b2c3d4e5f6789abcdef0123456789"],
            status: 400,
            reason: .badMessageId
        ),
        Case(
            name: "an apns-id with a non-hex digit",
            headers: alert + ["apns-id: 0a1b2c3d-4e5f-6789-abcd-ef012345678g"],
            status: 400,
            reason: .badMessageId
        ),
        Case(
            name: "an apns-id one digit too long",
            headers: alert + ["apns-id: \(uuid)0"],
            status: 400,
            reason: .badMessageId
        ),
        Case(
            name: "an apns-collapse-id of 65 bytes",
            headers: alert + ["apns-collapse-id: " + String(repeating: "c", count: 65)],
            status: 400,
            reason: .badCollapseId
        ),
        Case(
            name: "an apns-expiration that is not a number",
            headers: alert + ["apns-expiration: soon"],
            status: 400,
            reason: .badExpirationDate
        ),
        Case(name: "no apns-push-type", headers: ["apns-topic: \(topic)"], status: 400, reason: .missingPushType),
        Case(
            name: "an unknown apns-push-type",
            headers: ["apns-topic: \(topic)", "apns-push-type: banner"],
            status: 400,
            reason: .invalidPushType
        ),
        Case(
            name: "apns-priority 7",
            headers: alert + ["apns-priority: 7"],
            status: 400,
            reason: .badPriority
        ),
        Case(
            name: "a background push at priority 10",
            headers: ["apns-topic: \(topic)", "apns-push-type: background", "apns-priority: 10"],
            status: 400,
            reason: .badPriority
        ),
        Case(name: "an empty payload", body: "", status: 400, reason: .payloadEmpty),
        Case(
            name: "a payload of 4,097 bytes",
            body: String(repeating: "x", count: 4097),
            status: 413,
            reason: .payloadTooLarge
        ),
        Case(
            name: "a VoIP payload of 5,120 bytes",
            headers: ["apns-topic: \(topic)", "apns-push-type: voip"],
            body: String(repeating: "x", count: 5120),
            status: 200
        ),
    ]
    static let topic = UpstreamHarness.topic

    @Test(
        "each request is answered with APNs' status and reason; an accepted token is recorded in lower case",
        .enabled(
            if: interopRequired || executablePath("nghttp") != nil,
            "nghttp is not installed (Debian: nghttp2-client)"
        )
    )
    func refusals() async throws {
        let nghttp = try #require(executablePath("nghttp"), "install nghttp2-client")
        let pki = try DevelopmentCA()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "apns-bridge-mock-validation-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let identity = try pki.providerIdentity(bundleID: Self.topic)
        let files = try identity.writePEMFiles(to: directory, name: "provider")

        var configuration = MockAPNsConfiguration(
            certificateChain: [pki.server.certificate],
            privateKey: pki.server.privateKey
        )
        configuration.port = 0
        configuration.clientCertificateTrustRoots = .certificates([pki.caCertificate])
        configuration.topics = [Self.topic]
        try await withResource(try await MockAPNsServer.start(configuration: configuration, logger: .forTests())) {
            mock in
            for (index, check) in Self.cases.enumerated() {
                var arguments = check.certificate ? ["--cert=\(files.certificate)", "--key=\(files.privateKey)"] : []
                arguments += check.headers.map { "--header=\($0)" }
                if let body = check.body {
                    let bodyPath = directory + "/body-\(index)"
                    try body.write(toFile: bodyPath, atomically: true, encoding: .utf8)
                    arguments.append("--data=\(bodyPath)")
                }
                arguments.append("https://127.0.0.1:\(mock.port)\(check.path)")
                let run = try await ChildRun.run(nghttp, arguments, timeout: .seconds(60))
                #expect(run.status == 0, "\(check.name): nghttp exited \(run.status): \(run.error)")

                let records = mock.ledger.records
                #expect(records.count == index + 1, "\(check.name): one answer per request")
                guard let record = records.last else { continue }
                #expect(record.status == check.status, "\(check.name)")
                #expect(record.reason == check.reason, "\(check.name)")
                if let reason = check.reason {
                    #expect(
                        run.output.contains(#""reason":"\#(reason.rawValue)""#),
                        "\(check.name): \(run.output)"
                    )
                }
                if check.status == 200 {
                    #expect(
                        record.token == String(repeating: "ab", count: 32),
                        "\(check.name): the token, in lower case"
                    )
                }
            }
        }
    }
}

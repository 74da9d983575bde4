import Benchmark
import BenchmarkSupport
import BridgeCore
import BridgeForwarding
import Crypto
import Foundation
import LegacyProtocol
import Logging
import NIOCore
import NIOHPACK
@_spi(Benchmarks) import UpstreamAPNs

// The upstream half of one notification, without I/O: the request built from a decoded frame
// (path, apns-id, push type), its HTTP/2 header block, the authentication token taken from the cache,
// and the mapping of an APNs answer back to a legacy status.
//
// Allocation counts are checked against Thresholds/ (`mallocCountTotal`, p90).

private func sampleNotification() -> ForwardedNotification {
    var token = ByteBuffer()
    token.writeInteger(UInt64(0x0123_4567_89AB_CDEF))
    token.writeRepeatingByte(0xAB, count: 24)
    var payload = ByteBuffer(string: #"{"aps":{"alert":""#)
    payload.writeRepeatingByte(UInt8(ascii: "x"), count: 200 - payload.readableBytes - 3)
    payload.writeString(#""}}"#)
    return ForwardedNotification(
        tenant: Tenant(name: "bench", topic: "com.example.app", environment: .sandbox),
        frame: NotificationFrame(
            command: .itemized,
            identifier: NotificationIdentifier(rawValue: 42),
            expiration: 1_900_000_000,
            priority: 10,
            deviceToken: token,
            payload: payload
        )
    )
}

private func tokenSource() -> AuthenticationTokenSource {
    let signer = AuthenticationTokenSigner(key: P256.Signing.PrivateKey(), keyID: "KEY1234567", teamID: "TEAM123456")
    return AuthenticationTokenSource(
        signer: signer,
        logger: Logger(label: "bench", factory: { _ in SwiftLogNoOpLogHandler() })
    )
}

let benchmarks: @Sendable () -> Void = {
    let notification = sampleNotification()
    let ids = APNsIDGenerator()

    Benchmark("apns-id", configuration: apnsBridgeBenchmarkConfiguration()) { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(ids.next())
        }
    }

    Benchmark("Request from a frame (path, apns-id, push type)", configuration: apnsBridgeBenchmarkConfiguration()) {
        benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(APNsForwarder.request(for: notification))
        }
    }

    let request = APNsForwarder.request(for: notification)
    let authorization = "bearer " + (try! tokenSource().currentToken().value)
    Benchmark("Header block of one request", configuration: apnsBridgeBenchmarkConfiguration()) { benchmark in
        var encoder = APNsRequestHeaderEncoder(authority: "api.sandbox.push.apple.com")
        _ = encoder.headers(for: request, authorization: authorization)  // names indexed once
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            blackHole(encoder.headers(for: request, authorization: authorization))
        }
        benchmark.stopMeasurement()
    }

    let source = tokenSource()
    _ = try! source.currentToken()
    Benchmark("Authentication token reused from the cache", configuration: apnsBridgeBenchmarkConfiguration()) {
        benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(try source.currentToken())
        }
        precondition(source.mintCount == 1, "the cached token was minted again")
    }

    let signer = AuthenticationTokenSigner(key: P256.Signing.PrivateKey(), keyID: "KEY1234567", teamID: "TEAM123456")
    Benchmark(
        "Authentication token minted (ES256), for comparison",
        configuration: apnsBridgeBenchmarkConfiguration(scaling: .one)
    ) { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(try signer.sign(issuedAt: Date()))
        }
    }

    // Every reason Apple documents, with its status, plus one unknown reason.
    let answers: [(Int, APNsReason?)] = [
        (200, nil), (400, .badDeviceToken), (400, .deviceTokenNotForTopic), (400, .missingTopic),
        (400, .payloadEmpty), (400, .badTopic), (400, .topicDisallowed), (400, .badPriority),
        (403, .expiredProviderToken), (403, .invalidProviderToken), (403, .badCertificate),
        (410, .unregistered), (410, .expiredToken), (413, .payloadTooLarge), (429, .tooManyRequests),
        (500, .internalServerError), (503, .serviceUnavailable), (503, .shutdown), (400, APNsReason("SomethingNew")),
    ]
    Benchmark("Reason to legacy status (19 answers)", configuration: apnsBridgeBenchmarkConfiguration()) { benchmark in
        for _ in benchmark.scaledIterations {
            for (status, reason) in answers {
                blackHole(LegacyOutcomeMapping(status: status, reason: reason, timestamp: 1_767_225_600_000).outcome)
            }
        }
    }

    let errorBody = ByteBuffer(string: #"{"reason":"Unregistered","timestamp":1767225600000}"#)
    Benchmark("Error body parsed (JSON)", configuration: apnsBridgeBenchmarkConfiguration()) { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(APNsErrorBody.parse(errorBody))
        }
    }
}

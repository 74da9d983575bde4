import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import MockAPNs
import NIOCore
import Testing

/// docs/protocol.md#resend-records as real legacy clients resend, through `apns-bridge serve` to MockAPNs: after
/// an error-response (or a status 10), each client resends the rest of its batch in its own way,
/// and every notification it meant to send reaches APNs exactly once (counted at the mock).
@Suite("Resends as real clients make them (child processes)", .serialized)
struct ResendBehaviourTests {
    /// How a client rebuilds the rest of its batch after an error-response.
    enum ResendStyle: String, CaseIterable, CustomTestStringConvertible {
        /// The same frames, byte for byte.
        case sameIdentifiers
        /// Each resent frame's identifier is its index in the new batch, from 0.
        case renumberedFrom0
        /// The same, from 1.
        case renumberedFrom1
        /// The same identifiers, with "now + 1 day" computed again.
        case recomputedExpiry

        var testDescription: String { self.rawValue }
    }

    /// Where the resend lands.
    enum Deployment: String, CaseIterable, CustomTestStringConvertible {
        /// The same `serve` process, SQLite.
        case oneInstance
        /// The process restarted (SIGTERM, then `serve` again on the same SQLite file).
        case restarted
        /// Two processes on one PostgreSQL: the error on the first, the resend on the second.
        case twoInstances

        var testDescription: String { self.rawValue }

        static var available: [Deployment] {
            TestDatabases.postgresURL == nil ? [.oneInstance, .restarted] : Self.allCases
        }
    }

    static let size = 600
    static let badPosition = 100
    static let firstExpiry = UInt32(Date().timeIntervalSince1970) + 86_400

    static func token(_ position: Int) -> ByteBuffer {
        FrameBuilder.token(0x5E_0000 + position)
    }

    static func hex(_ token: ByteBuffer) -> String {
        token.hexDump(format: .compact)
    }

    static func frame(
        position: Int,
        identifier: UInt32,
        expiry: UInt32 = Self.firstExpiry,
        token: ByteBuffer? = nil
    ) -> ByteBuffer {
        FrameBuilder.frame(
            .itemized,
            identifier: identifier,
            expiration: expiry,
            priority: 10,
            token: token ?? Self.token(position),
            payload: FrameBuilder.payload(#"{"aps":{"alert":"notification \#(position)"}}"#)
        )
    }

    /// The frames a client of `style` resends: every position after the failed one, with its
    /// own identifiers and expiry.
    static func resend(_ positions: [Int], style: ResendStyle, token: (Int) -> ByteBuffer = Self.token) -> ByteBuffer {
        var bytes = ByteBuffer()
        for (index, position) in positions.enumerated() {
            let identifier: UInt32
            var expiry = Self.firstExpiry
            switch style {
            case .sameIdentifiers: identifier = UInt32(1_000 + position)
            case .renumberedFrom0: identifier = UInt32(index)
            case .renumberedFrom1: identifier = UInt32(index + 1)
            case .recomputedExpiry:
                identifier = UInt32(1_000 + position)
                expiry += 7
            }
            bytes.writeImmutableBuffer(
                Self.frame(position: position, identifier: identifier, expiry: expiry, token: token(position))
            )
        }
        return bytes
    }

    /// Accepted requests per token (hex) at the mock.
    static func deliveries(_ mock: MockAPNsServer) -> [String: Int] {
        var seen: [String: Int] = [:]
        for record in mock.ledger.accepted {
            seen[record.token, default: 0] += 1
        }
        return seen
    }

    /// Sends `bytes`, half-closes, and returns what the bridge answered once it closed: it closes
    /// only when every notification of the connection has an outcome.
    static func sendAndFinish(
        _ bytes: ByteBuffer,
        to bridge: BridgeProcess,
        environment: BridgeProcess.Environment
    ) async throws -> ByteBuffer {
        let client = try await LegacyConnection.connect(
            to: bridge.gatewayAddress,
            identity: try environment.provider(),
            trusting: environment.pki.caCertificate
        )
        try await client.send(bytes)
        try await client.closeOutput()
        return try await client.bytesUntilClose(timeout: .seconds(120))
    }

    /// The bridges of a deployment: where the batch fails, and where the resend goes.
    struct Bridges {
        var first: BridgeProcess
        var resendTarget: () async throws -> BridgeProcess
        var all: () -> [BridgeProcess]
    }

    static func start(_ deployment: Deployment, environment: BridgeProcess.Environment) async throws -> Bridges {
        switch deployment {
        case .oneInstance:
            let bridge = try await BridgeProcess.start(
                environment,
                store: "sqlite:\(environment.directory)/store.sqlite",
                name: "one"
            )
            return Bridges(first: bridge, resendTarget: { bridge }, all: { [bridge] })
        case .restarted:
            let store = "sqlite:\(environment.directory)/store.sqlite"
            let first = try await BridgeProcess.start(environment, store: store, name: "before")
            let later = LockedBox<BridgeProcess?>(nil)
            return Bridges(
                first: first,
                resendTarget: {
                    await first.terminate()
                    let restarted = try await BridgeProcess.start(environment, store: store, name: "after")
                    later.value = restarted
                    return restarted
                },
                all: { [first] + (later.value.map { [$0] } ?? []) }
            )
        case .twoInstances:
            let url = try await TestDatabases.postgresLocation()
            let first = try await BridgeProcess.start(environment, store: url, name: "first")
            let second = try await BridgeProcess.start(environment, store: url, name: "second")
            return Bridges(first: first, resendTarget: { second }, all: { [first, second] })
        }
    }

    @Test(
        "A batch fails at one token; the client resends the rest its own way; each notification reaches APNs once",
        arguments: ResendStyle.allCases,
        Deployment.available
    )
    func resendAfterError(style: ResendStyle, deployment: Deployment) async throws {
        let environment = try await BridgeProcess.Environment.make()
        environment.mock.script.rejectAsBadToken(Self.hex(Self.token(Self.badPosition)))
        // Answers take a while, so that when the bad token's answer arrives, the bridge has
        // already forwarded the whole window after it: those become resend records.
        environment.mock.script.delayResponses(by: .milliseconds(50))
        let bridges = try await Self.start(deployment, environment: environment)

        var batch = ByteBuffer()
        for position in 0..<Self.size {
            batch.writeImmutableBuffer(Self.frame(position: position, identifier: UInt32(1_000 + position)))
        }
        var answer = try await Self.sendAndFinish(batch, to: bridges.first, environment: environment)
        let packet = answer.readErrorResponse()
        #expect(
            packet
                == ErrorResponsePacket(
                    status: .invalidToken,
                    identifier: .init(rawValue: UInt32(1_000 + Self.badPosition))
                )
        )
        let forwardedBeyond = Self.deliveries(environment.mock).count - Self.badPosition
        #expect(
            forwardedBeyond > 0,
            "the scenario should forward notifications after the bad one before the failure is known"
        )

        environment.mock.script.delayResponses(by: .zero)
        let target = try await bridges.resendTarget()
        let rest = Array((Self.badPosition + 1)..<Self.size)
        var resendAnswer = try await Self.sendAndFinish(
            Self.resend(rest, style: style),
            to: target,
            environment: environment
        )
        let resendPacket = resendAnswer.readErrorResponse()
        #expect(resendPacket == nil, "the resend is accepted")
        if resendPacket != nil {
            for bridge in bridges.all() {
                print(
                    bridge.log.split(separator: "\n").filter {
                        $0.contains("error") || $0.contains("warning") || $0.contains("failed")
                    }.suffix(10).joined(separator: "\n")
                )
            }
        }

        let seen = Self.deliveries(environment.mock)
        let intended = (0..<Self.size).filter { $0 != Self.badPosition }.map { Self.hex(Self.token($0)) }
        let duplicated = intended.filter { (seen[$0] ?? 0) > 1 }
        let lost = intended.filter { seen[$0] == nil }
        var diagnostics = ""
        if !duplicated.isEmpty || !lost.isEmpty {
            // Which way a duplicate came: the upstream client resending an unanswered request
            // (timeouts, retries), or a resend not recognised (deduplicated, forwarded again).
            for bridge in bridges.all() {
                diagnostics += "\n" + (await bridge.diagnostics(["resends", "timeouts", "retries", "goaways"]))
            }
        }
        #expect(
            duplicated.count == 0,
            "\(duplicated.count) delivered twice (\(forwardedBeyond) were forwarded after the bad token)\(diagnostics)"
        )
        #expect(lost.count == 0, "\(lost.count) lost")
        #expect(seen.count == intended.count)

        for bridge in bridges.all() { await bridge.terminate() }
        await environment.close()
    }

    @Test(
        "A batch that holds the same notification twice after the failed one: each copy delivered once",
        arguments: Deployment.available
    )
    func identicalNotificationsInOneBatch(deployment: Deployment) async throws {
        let environment = try await BridgeProcess.Environment.make()
        environment.mock.script.rejectAsBadToken(Self.hex(Self.token(Self.badPosition)))
        environment.mock.script.delayResponses(by: .milliseconds(50))
        let bridges = try await Self.start(deployment, environment: environment)
        // Positions 150 and 151 are the same notification (same token, payload and priority).
        let twin = Self.token(150)
        func token(_ position: Int) -> ByteBuffer { position == 151 ? twin : Self.token(position) }
        func frame(_ position: Int, identifier: UInt32) -> ByteBuffer {
            FrameBuilder.frame(
                .itemized,
                identifier: identifier,
                expiration: Self.firstExpiry,
                token: token(position),
                payload: FrameBuilder.payload(#"{"aps":{"alert":"twin"}}"#)
            )
        }
        var batch = ByteBuffer()
        for position in 0..<Self.size {
            batch.writeImmutableBuffer(
                position == 150 || position == 151
                    ? frame(position, identifier: UInt32(position))
                    : Self.frame(position: position, identifier: UInt32(position))
            )
        }
        var answer = try await Self.sendAndFinish(batch, to: bridges.first, environment: environment)
        let packet = answer.readErrorResponse()
        #expect(packet?.status == .invalidToken)
        #expect(
            Self.deliveries(environment.mock)[Self.hex(twin)] == 2,
            "both copies were forwarded before the failure was known"
        )

        environment.mock.script.delayResponses(by: .zero)
        let target = try await bridges.resendTarget()
        var resend = ByteBuffer()
        for position in (Self.badPosition + 1)..<Self.size {
            resend.writeImmutableBuffer(
                position == 150 || position == 151
                    ? frame(position, identifier: UInt32(position))
                    : Self.frame(position: position, identifier: UInt32(position))
            )
        }
        #expect(try await Self.sendAndFinish(resend, to: target, environment: environment).readableBytes == 0)

        let seen = Self.deliveries(environment.mock)
        #expect(seen[Self.hex(twin)] == 2, "meant twice, delivered twice")
        let others = (0..<Self.size).filter { ![Self.badPosition, 150, 151].contains($0) }.map {
            Self.hex(Self.token($0))
        }
        #expect(others.allSatisfy { seen[$0] == 1 })

        for bridge in bridges.all() { await bridge.terminate() }
        await environment.close()
    }

    @Test(
        "Status 10 at a graceful shutdown: a client that resends from the named notification (or after it) to the restarted bridge duplicates nothing",
        arguments: [true, false]
    )
    func resendAfterShutdown(includingNamed: Bool) async throws {
        let environment = try await BridgeProcess.Environment.make()
        environment.mock.script.delayResponses(by: .milliseconds(200))
        let store = "sqlite:\(environment.directory)/store.sqlite"
        let bridge = try await BridgeProcess.start(environment, store: store, name: "before")
        let client = try await LegacyConnection.connect(
            to: bridge.gatewayAddress,
            identity: try environment.provider(),
            trusting: environment.pki.caCertificate
        )
        var batch = ByteBuffer()
        for position in 0..<Self.size {
            batch.writeImmutableBuffer(Self.frame(position: position, identifier: UInt32(position)))
        }
        try await client.send(batch)
        // Some notifications are answered, more are in flight, the rest not read yet.
        #expect(await environment.mock.ledger.waitForAccepted(1))
        await bridge.terminate()
        var answer = try await client.bytesUntilClose()
        let read = answer.readErrorResponse()
        let packet = try #require(read)
        #expect(packet.status == .shutdown)
        let named = Int(packet.identifier.rawValue)
        #expect(Self.deliveries(environment.mock)[Self.hex(Self.token(named))] == 1)

        environment.mock.script.delayResponses(by: .zero)
        let restarted = try await BridgeProcess.start(environment, store: store, name: "after")
        let rest = Array((includingNamed ? named : named + 1)..<Self.size)
        #expect(
            try await Self.sendAndFinish(
                Self.resend(rest, style: .renumberedFrom0),
                to: restarted,
                environment: environment
            ).readableBytes == 0
        )

        let seen = Self.deliveries(environment.mock)
        let intended = (0..<Self.size).map { Self.hex(Self.token($0)) }
        #expect(intended.filter { (seen[$0] ?? 0) > 1 }.isEmpty)
        #expect(intended.allSatisfy { seen[$0] != nil })

        await restarted.terminate()
        await environment.close()
    }

    @Test(
        "A shutdown whose grace runs out with notifications in flight: the resends after it are forwarded at once, and none fails",
        arguments: [ResendStyle.sameIdentifiers, .renumberedFrom0],
        Deployment.available.filter { $0 != .oneInstance }
    )
    func resendAfterShutdownWithWorkInFlight(style: ResendStyle, deployment: Deployment) async throws {
        let environment = try await BridgeProcess.Environment.make()
        let providers = 4
        let perProvider = 100
        // A short grace, and a resend window far longer than the test may take: a resend that
        // waited for an outcome nobody can write any more would outlast `sendAndFinish`'s
        // timeout, where before this fix it waited out the window and then failed with status 1.
        let variables = [
            "APNS_BRIDGE_GATEWAY_SHUTDOWN_GRACE_SECONDS": "1", "APNS_BRIDGE_STORE_RESEND_WINDOW_SECONDS": "3600",
        ]
        let store =
            deployment == .twoInstances
            ? try await TestDatabases.postgresLocation() : "sqlite:\(environment.directory)/store.sqlite"
        let first = try await BridgeProcess.start(environment, store: store, variables: variables, name: "first")
        let second =
            deployment == .twoInstances
            ? try await BridgeProcess.start(environment, store: store, variables: variables, name: "second") : nil

        // One answered notification first: a token connection opens more than one stream only
        // after its first success.
        let warmUp = FrameBuilder.token(0x5F_0000)
        #expect(
            try await Self.sendAndFinish(
                Self.frame(position: 0, identifier: 1, token: warmUp),
                to: first,
                environment: environment
            ).readableBytes == 0
        )
        // Then APNs stops answering: everything the providers send stays in flight.
        environment.mock.script.delayResponses(by: .hours(1))
        func token(provider: Int, position: Int) -> ByteBuffer {
            FrameBuilder.token(0x60_0000 + provider * 1_000 + position)
        }
        var clients: [LegacyConnection] = []
        for provider in 0..<providers {
            let client = try await LegacyConnection.connect(
                to: first.gatewayAddress,
                identity: try environment.provider(),
                trusting: environment.pki.caCertificate
            )
            var batch = ByteBuffer()
            for position in 0..<perProvider {
                batch.writeImmutableBuffer(
                    Self.frame(
                        position: position,
                        identifier: UInt32(1 + position),
                        token: token(provider: provider, position: position)
                    )
                )
            }
            try await client.send(batch)
            clients.append(client)
        }
        #expect(
            await environment.mock.ledger.waitForReceived(1 + providers * perProvider),
            "every notification reached the upstream"
        )
        await first.terminate()
        var named: [Int] = []
        for client in clients {
            var answer = try await client.bytesUntilClose()
            let read = answer.readErrorResponse()
            let packet = try #require(read)
            #expect(packet.status == .shutdown)
            named.append(Int(packet.identifier.rawValue))
        }

        // The resend, as legacy clients make it: everything after the identifier named.
        environment.mock.script.delayResponses(by: .zero)
        let target: BridgeProcess
        if let second {
            target = second
        } else {
            target = try await BridgeProcess.start(environment, store: store, variables: variables, name: "restarted")
        }
        for provider in 0..<providers {
            let rest = Array(named[provider]..<perProvider)
            let resent = Self.resend(rest, style: style) { token(provider: provider, position: $0) }
            let answer = try await Self.sendAndFinish(resent, to: target, environment: environment)
            #expect(
                answer.readableBytes == 0,
                "provider \(provider): no error-response, so no 08 01 that APNs did not cause"
            )
        }
        let seen = Self.deliveries(environment.mock)
        for provider in 0..<providers {
            let missing = (0..<perProvider).filter { seen[Self.hex(token(provider: provider, position: $0))] == nil }
            #expect(missing.isEmpty, "provider \(provider): \(missing.count) never delivered")
        }
        let metrics = try await ServeProcessTests.get(try #require(target.adminPort), "/metrics").body
        let forwardedAgain = metrics.split(separator: "\n").first {
            $0.hasPrefix("apns_bridge_resends_forwarded_again_total ")
        }
        #expect(
            forwardedAgain == "apns_bridge_resends_forwarded_again_total \(providers * perProvider)",
            "each resend matched a record whose outcome was unknown"
        )

        // Each resend went upstream under the id its first attempt had on the first bridge, as
        // its apns-id and collapse id, so APNs coalesces the two on the device (the first
        // attempts were processed too, though never answered). An id's upper half is its
        // process's: the warm-up's is the first bridge's, a new notification's the target's.
        func process(_ id: String?) -> Substring? { id?.prefix(18) }
        let firstBridge = try #require(
            process(environment.mock.ledger.accepted.first { $0.token == Self.hex(warmUp) }?.apnsID)
        )
        let fresh = FrameBuilder.token(0x5F_0001)
        #expect(
            try await Self.sendAndFinish(
                Self.frame(position: 0, identifier: 1, token: fresh),
                to: target,
                environment: environment
            ).readableBytes == 0
        )
        let targetBridge = try #require(
            process(environment.mock.ledger.accepted.first { $0.token == Self.hex(fresh) }?.apnsID)
        )
        #expect(targetBridge != firstBridge)
        let providerTokens = Set(
            (0..<providers).flatMap { provider in
                (0..<perProvider).map { Self.hex(token(provider: provider, position: $0)) }
            }
        )
        let resends = environment.mock.ledger.accepted.filter { providerTokens.contains($0.token) }
        #expect(resends.count == providers * perProvider)
        #expect(resends.allSatisfy { $0.collapseID == $0.apnsID }, "the collapse id is the apns-id")
        let underNewIDs = resends.filter { process($0.apnsID) != firstBridge }.count
        #expect(underNewIDs == 0, "resends went upstream under a new id, not the first attempt's")
        #expect(Set(resends.map(\.apnsID)).count == resends.count, "two notifications never share an id")

        await target.terminate()
        await environment.close()
    }
}

/// A value set by one task and read by another after it.
final class LockedBox<Value: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: Value

    init(_ value: Value) {
        self.stored = value
    }

    var value: Value {
        get { self.lock.withLock { self.stored } }
        set { self.lock.withLock { self.stored = newValue } }
    }
}

import BridgeCore
import BridgeServer
import BridgeTestSupport
import LegacyClient
import LegacyProtocol
import NIOCore
import Testing

/// docs/protocol.md#after-a-failure and #resend-records over real TLS: an upstream failure in the middle of a pipelined
/// stream, and the provider's resend on a new connection.
@Suite("Upstream failure and resend")
struct ResendTests {
    static let payload = FrameBuilder.payload()

    static func frames(_ identifiers: ClosedRange<UInt32>, command: NotificationFrame.Command = .itemized) -> ByteBuffer
    {
        var bytes = ByteBuffer()
        for identifier in identifiers {
            bytes.writeImmutableBuffer(
                FrameBuilder.frame(
                    command,
                    identifier: identifier,
                    token: FrameBuilder.token(Int(identifier)),
                    payload: Self.payload
                )
            )
        }
        return bytes
    }

    @Test(
        "Failure of notification k of 1,000: error-response for k, nothing new forwarded after it, resend reaches the upstream once",
        arguments: [(UInt32(137), NotificationFrame.Command.itemized), (UInt32(600), .enhanced)]
    )
    func failureInThePipeline(k: UInt32, command: NotificationFrame.Command) async throws {
        let count: UInt32 = 1_000
        try await withResource(
            try await GatewayHarness.start(script: { notification, _ in
                // k fails after a while; the others succeed quickly, so when k's failure is decided
                // some notifications after it were already forwarded (and some of those are done).
                if notification.frame.identifier.rawValue == k {
                    return .init(.rejected(.invalidToken), after: .milliseconds(40))
                }
                return .init(.accepted, after: .milliseconds(Int64(notification.frame.identifier.rawValue % 7)))
            }) { configuration in
                configuration.session.maximumInFlight = 100
            }
        ) { harness in

            let first = try await harness.connect()
            // All at once, as a pipelining provider writes, and not awaited: what follows the
            // failure is read and dropped, and on a loaded machine the bridge's close_notify can
            // come before the last of it is written (docs/protocol.md#closing), which fails the
            // rest of the write. The packet is what the provider reads.
            first.channel.writeAndFlush(Self.frames(1...count, command: command), promise: nil)
            let received = try await first.bytesUntilClose()
            var expected = ByteBuffer()
            expected.writeErrorResponse(
                ErrorResponsePacket(status: .invalidToken, identifier: NotificationIdentifier(rawValue: k))
            )
            #expect(received == expected)

            let forwardedOnFirst = harness.forwarder.ledger.map(\.frame.identifier.rawValue)
            // In order up to the bound of in-flight notifications: nothing read after the failure
            // was decided went upstream.
            #expect(forwardedOnFirst.count == Set(forwardedOnFirst).count)
            #expect(Set(forwardedOnFirst).isSuperset(of: Set(1...k)))
            let forwardedAfterK = forwardedOnFirst.filter { $0 > k }
            #expect(forwardedAfterK.allSatisfy { $0 < k + 100 })
            #expect(
                !forwardedAfterK.isEmpty,
                "the scenario should forward some notifications after k before the failure is known"
            )

            // The provider resends everything after k on a new connection, then one more.
            let second = try await harness.connect()
            var resend = Self.frames((k + 1)...count, command: command)
            resend.writeImmutableBuffer(Self.frames((count + 1)...(count + 1), command: command))
            try await second.send(resend)
            try await harness.forwarder.waitForLedgerCount(Int(count) + 1, on: second.channel.eventLoop)
            // Notifications are dispatched in order, so the sentinel arriving means every resend was
            // handled: nothing more is on its way.
            let sentinelSeen = harness.forwarder.ledger.contains { $0.frame.identifier.rawValue == count + 1 }
            #expect(sentinelSeen)

            var seen: [UInt32: Int] = [:]
            for notification in harness.forwarder.ledger {
                seen[notification.frame.identifier.rawValue, default: 0] += 1
            }
            let duplicated = seen.filter { $0.value > 1 }.map(\.key).sorted()
            let lost = (1...count + 1).filter { seen[$0] == nil }
            #expect(duplicated == [])
            #expect(lost == [])
            #expect(harness.forwarder.ledger.count == Int(count) + 1)
            #expect(second.isActive)
            await second.close()
        }
    }

    @Test("A resend whose original outcome is still pending waits for it; a remembered failure is reported")
    func pendingRecordReportsItsFailure() async throws {
        // 1 fails at once; 2 is slow and then also fails: its failure must reach the provider
        // when 2 is resent, without sending 2 upstream again.
        try await withResource(
            try await GatewayHarness.start(script: { notification, _ in
                switch notification.frame.identifier.rawValue {
                case 1: .init(.rejected(.invalidToken))
                case 2: .init(.rejected(.invalidToken), after: .milliseconds(300))
                default: .init(.accepted)
                }
            })
        ) { harness in

            let first = try await harness.connect()
            try await first.send(Self.frames(1...2))
            var firstReceived = try await first.bytesUntilClose()
            #expect(firstReceived.readErrorResponse() == .init(status: .invalidToken, identifier: .init(rawValue: 1)))

            let second = try await harness.connect()
            try await second.send(Self.frames(2...3))
            var secondReceived = try await second.bytesUntilClose()
            #expect(secondReceived.readErrorResponse() == .init(status: .invalidToken, identifier: .init(rawValue: 2)))
            // 3 went upstream while the resent 2 waited for its remembered outcome; it was forwarded
            // before the failure was known, so it is itself remembered and not sent again.
            #expect(harness.forwarder.ledger.map(\.frame.identifier.rawValue) == [1, 2, 3])
            let third = try await harness.connect()
            try await third.send(Self.frames(3...4))
            try await harness.forwarder.waitForLedgerCount(4, on: third.channel.eventLoop)
            #expect(harness.forwarder.ledger.map(\.frame.identifier.rawValue) == [1, 2, 3, 4])
            #expect(third.isActive)
            await third.close()
        }
    }

    @Test(
        "A remembered failure is reported under the identifier of the resent frame, whatever the client renumbered it to"
    )
    func rememberedFailureUnderTheResentIdentifier() async throws {
        try await withResource(
            try await GatewayHarness.start(script: { notification, _ in
                switch notification.frame.identifier.rawValue {
                case 1: .init(.rejected(.invalidToken), after: .milliseconds(50))
                case 2: .init(.rejected(.invalidToken), after: .milliseconds(300))
                default: .init(.accepted)
                }
            })
        ) { harness in
            let first = try await harness.connect()
            try await first.send(Self.frames(1...2))
            var firstReceived = try await first.bytesUntilClose()
            #expect(firstReceived.readErrorResponse() == .init(status: .invalidToken, identifier: .init(rawValue: 1)))

            // The client rebuilds its queue from the failed position and numbers it from 0: the
            // frame for token 2 now carries identifier 0.
            let second = try await harness.connect()
            try await second.send(
                FrameBuilder.frame(
                    .itemized,
                    identifier: 0,
                    expiration: 86_400,
                    token: FrameBuilder.token(2),
                    payload: Self.payload
                )
            )
            var secondReceived = try await second.bytesUntilClose()
            #expect(secondReceived.readErrorResponse() == .init(status: .invalidToken, identifier: .init(rawValue: 0)))
            #expect(
                harness.forwarder.ledger.map(\.frame.identifier.rawValue) == [1, 2],
                "the resend was not sent again"
            )
        }
    }

    @Test("410 Unregistered is accepted silently and recorded for the feedback list")
    func unregisteredGoesToFeedback() async throws {
        try await withResource(
            try await GatewayHarness.start(script: { notification, _ in
                notification.frame.identifier.rawValue == 2
                    ? .init(.unregistered(timestamp: 1_700_000_000)) : .init(.accepted)
            })
        ) { harness in
            let client = try await harness.connect()
            try await client.send(Self.frames(1...3))
            try await harness.forwarder.waitForLedgerCount(3, on: client.channel.eventLoop)
            try await eventually { harness.feedback.allEntries.count == 1 }
            let entry = harness.feedback.allEntries[0]
            #expect(entry.deviceToken == FrameBuilder.token(2))
            #expect(entry.timestamp == 1_700_000_000)
            #expect(entry.tenant == "com.example.app")
            #expect(client.isActive)
            await client.close()
        }
    }
}

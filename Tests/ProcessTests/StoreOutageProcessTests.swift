import BridgeTestSupport
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import MockAPNs
import NIOCore
import Testing

/// `apns-bridge serve` on a PostgreSQL of the test's own that is stopped and started again
/// (docs/operations.md#store-outage): what an operator sees, and what a provider and a poller
/// get, while the store is gone.
@Suite("serve: the store goes away and comes back (child process)", .serialized)
struct StoreOutageProcessTests {
    @Test(
        "PostgreSQL stopped under serve: /healthz and /metrics show it, a poll is closed instead of held, a 410 answered meanwhile reaches the feedback list once it is back",
        .enabled(if: PostgresCluster.binaries != nil || interopRequired)
    )
    func outageThroughServe() async throws {
        try await PostgresCluster.oneOutageAtATime {
            try await withResource(try await PostgresCluster.start()) { cluster in
                try await withResource(try await BridgeProcess.Environment.make()) { environment in
                    let bridge = try await BridgeProcess.start(environment, store: cluster.url)
                    try await withResource(bridge) { bridge in
                        let admin = try #require(bridge.adminPort)
                        let identity = try environment.provider()
                        let ca = environment.pki.caCertificate
                        #expect(try await ServeProcessTests.get(admin, "/healthz").status == 200)

                        // A provider connected before the outage (its first query, for its
                        // tenant's resend records, answered): a 410 to it while the store is gone
                        // waits in memory for its entry.
                        let gone = FrameBuilder.token(0x410)
                        environment.mock.script.unregister(
                            token: gone.hexDump(format: .compact),
                            atMilliseconds: StoreProcessTests.unregisteredAt
                        )
                        let provider = try await LegacyConnection.connect(
                            to: bridge.gatewayAddress,
                            identity: identity,
                            trusting: ca
                        )
                        try await provider.send(ReloadTests.frame(1))
                        #expect(await environment.mock.ledger.waitForAccepted(1))

                        try await cluster.stopFast()
                        // The heartbeat notices within its interval (2 s) and the one after.
                        let unhealthy = try await eventually("/healthz to answer 503", timeout: .seconds(60)) {
                            let answer = try await ServeProcessTests.get(admin, "/healthz")
                            return answer.status == 503 ? answer.body : nil
                        }
                        #expect(unhealthy.contains("the store has not answered"), "\(unhealthy)")
                        let metrics = try await ServeProcessTests.get(admin, "/metrics").body
                        #expect(metrics.contains("apns_bridge_store_reachable 0"), "\(metrics.suffix(2000))")

                        try await provider.send(
                            FrameBuilder.frame(.itemized, identifier: 2, token: gone, payload: FrameBuilder.payload())
                        )
                        #expect(await environment.mock.ledger.waitForReceived(2))

                        // A poll meanwhile is closed within the store timeout (10 s), not held.
                        let held = try await FeedbackPoller.poll(
                            bridge.feedbackAddress,
                            identity: identity,
                            trusting: ca,
                            timeout: .seconds(45)
                        )
                        #expect(held.tupleCount == 0)

                        try await cluster.startServer()
                        try await eventually("/healthz to answer 200 again", timeout: .seconds(60)) {
                            try await ServeProcessTests.get(admin, "/healthz").status == 200
                        }
                        try await eventually("the 410's entry to be stored", timeout: .seconds(60)) {
                            StoreProcessTests.storedTokenIDs(in: bridge.log).contains(StoreProcessTests.tokenID(gone))
                        }
                        let served = try await FeedbackPoller.poll(
                            bridge.feedbackAddress,
                            identity: identity,
                            trusting: ca
                        )
                        #expect(
                            served.tuples
                                == [
                                    FeedbackTuple(
                                        timestamp: UInt32(StoreProcessTests.unregisteredAt / 1000),
                                        deviceToken: gone
                                    )
                                ]
                        )
                        #expect(
                            try await FeedbackPoller.poll(bridge.feedbackAddress, identity: identity, trusting: ca)
                                .tupleCount == 0
                        )
                        #expect(
                            try await ServeProcessTests.get(admin, "/metrics").body.contains(
                                "apns_bridge_store_reachable 1"
                            )
                        )
                        await provider.close()
                    }
                }
            }
        }
    }
}

import BridgeCore
import BridgeServer
import BridgeTestSupport
import LegacyProtocol
import NIOCore
import NIOPosix
import Foundation

// apns-bridge: for now only `demo`. The serve, mock-apns, send, feedback and check-config
// commands arrive with the product issue; until the HTTP/2 client exists, the demo's upstream is
// a scripted stand-in that answers the way APNs would.

let usage = """
    usage: apns-bridge demo

      demo   start the legacy gateway on 127.0.0.1 with a throwaway CA and provider certificate,
             send notifications through it over TLS with the built-in legacy client, and print
             what happened. Needs no Apple account and no database.
    """

let arguments = CommandLine.arguments.dropFirst()
guard arguments.first == "demo" else {
    print(usage)
    exit(arguments.first == "--help" || arguments.first == "-h" ? 0 : 64)
}

let badToken = FrameBuilder.token(0xBAD)
let unregisteredToken = FrameBuilder.token(0x410)

let harness = try await GatewayHarness.start(script: { notification, _ in
    switch notification.frame.deviceToken {
    case badToken: .init(.rejected(.invalidToken))  // APNs: 400 BadDeviceToken
    case unregisteredToken: .init(.unregistered(timestamp: 1_767_225_600))  // APNs: 410 Unregistered
    default: .init(.accepted)
    }
})
print("gateway listening on \(harness.server.localAddress) (TLS 1.2, client certificate required)")
print("provider certificate: UID=com.example.demo, issued by a CA made for this run\n")

/// Sends frames on a new provider connection. With `expectFailure`, reads until the gateway closes
/// and prints the error-response; otherwise waits until the upstream holds `upstreamTotal`
/// notifications, then closes.
func send(_ frames: [(UInt32, ByteBuffer)], note: String, expectFailure: Bool = false, upstreamTotal: Int = 0) async throws {
    let client = try await harness.connect(bundleID: "com.example.demo")
    var bytes = ByteBuffer()
    for (identifier, token) in frames {
        bytes.writeImmutableBuffer(FrameBuilder.frame(.itemized, identifier: identifier, token: token, payload: FrameBuilder.payload()))
    }
    print("→ \(note)")
    try await client.send(bytes)
    if expectFailure {
        var received = try await client.bytesUntilClose()
        if let packet = received.readErrorResponse() {
            print("  ← error-response: status \(packet.status), identifier \(packet.identifier); the gateway closed the connection")
        }
    } else {
        try await harness.upstream.waitForLedgerCount(upstreamTotal, on: client.channel.eventLoop)
        print("  ← nothing (accepted); the connection stays open")
        await client.close()
    }
}

try await send(
    [(1, FrameBuilder.token(1)), (2, FrameBuilder.token(2)), (3, unregisteredToken)],
    note: "identifiers 1, 2, 3 (3 goes to a token APNs calls Unregistered)",
    upstreamTotal: 3
)
try await send(
    [(4, FrameBuilder.token(4)), (5, badToken), (6, FrameBuilder.token(6))],
    note: "identifiers 4, 5, 6 (5 goes to a token APNs rejects as BadDeviceToken)",
    expectFailure: true
)
try await send(
    [(6, FrameBuilder.token(6)), (7, FrameBuilder.token(7))],
    note: "the provider resends 6 on a new connection, then sends 7",
    upstreamTotal: 7
)

print("\nwhat the upstream received (POST /3/device/<token>):")
for notification in harness.upstream.ledger {
    let token = LogRedaction.token(notification.frame.deviceToken)
    print("  identifier \(notification.frame.identifier)  token \(token)  topic \(notification.tenant.topic ?? "-")")
}
print("\nfeedback entries recorded (served on port 2196 once the feedback service lands):")
for entry in harness.feedback.allEntries {
    print("  \(entry.tenant) \(entry.environment.rawValue): token \(LogRedaction.token(entry.deviceToken)) at \(entry.timestamp)")
}
await harness.stop()

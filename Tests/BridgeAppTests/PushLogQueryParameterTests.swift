import BridgeApp
import BridgeCore
import LegacyProtocol
import NIOCore
import Testing
import UpstreamAPNs

@Suite("Push log: the admin port's query parameters")
struct PushLogQueryParameterTests {
    @Test("apns_id finds the id the bridge sent: the UUID text back to its 128 bits")
    func apnsID() throws {
        let id = ForwardedNotification.ID.next()
        let text = APNsRequestID(high: id.high, low: id.low).description
        let query = try PushLogQuery(uri: "/push-log?apns_id=\(text.uppercased())")
        #expect(query.apnsID == id)
    }

    @Test("A whole token is compared by hash, a short one by prefix; identifier in decimal or 0x hex")
    func tokenAndIdentifier() throws {
        let token = (0..<32).map { UInt8($0 * 3) }
        let hex = token.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
        var query = try PushLogQuery(uri: "/push-log?token=\(hex)&identifier=0x10&limit=5")
        #expect(query.tokenHash == PushLog.tokenHash(ByteBuffer(bytes: token)))
        #expect(query.tokenPrefix == nil)
        #expect(query.identifier == NotificationIdentifier(rawValue: 16) && query.limit == 5)
        query = try PushLogQuery(uri: "/?token=0003&identifier=7&failures=1")
        #expect(query.tokenPrefix == [0, 3] && query.tokenHash == nil)
        #expect(query.identifier == NotificationIdentifier(rawValue: 7) && query.failuresOnly)
        #expect(try PushLogQuery(uri: "/") == PushLogQuery(), "no query, no filter")
    }

    @Test(
        "Bad values and unknown names are refused, naming the parameter",
        arguments: [
            "token=abc", "token=zz", "token_hash=12", "identifier=-1", "apns_id=nope", "status=gone", "limit=0",
            "limit=10001", "since=yesterday", "tokens=ab",
        ]
    )
    func refused(query: String) {
        let name = String(query.prefix { $0 != "=" })
        #expect {
            try PushLogQuery(uri: "/push-log?\(query)")
        } throws: { error in
            "\(error)".contains(name)
        }
    }
}

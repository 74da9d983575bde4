import BridgeCore
import BridgeTestSupport
import LegacyProtocol
import NIOCore
import NIOEmbedded
import Synchronization
import Testing

@Suite("In-memory resend record store")
struct ResendRecordStoreTests {
    static func key(_ number: UInt8) -> ResendRecordKey {
        ResendRecordKey(
            tenant: "t",
            deviceToken: ByteBuffer(repeating: number, count: 32),
            payloadDigest: PayloadDigest(bytes: (1, 2, 3, 4)),
            priority: 10
        )
    }

    @Test("A record is used once")
    func usedOnce() throws {
        let loop = EmbeddedEventLoop()
        let store = InMemoryResendRecordStore()
        #expect(!store.mayHoldLiveRecords(tenant: "t"))
        try store.remember([ResendRecord(key: Self.key(1), outcome: .accepted)], on: loop).wait()
        #expect(store.mayHoldLiveRecords(tenant: "t"))
        #expect(!store.mayHoldLiveRecords(tenant: "u"))
        #expect(try store.claim(Self.key(1), on: loop).wait() == .answered(.accepted))
        #expect(try store.claim(Self.key(1), on: loop).wait() == .new)
        #expect(try store.claim(Self.key(2), on: loop).wait() == .new)
    }

    @Test("Two identical notifications make two records")
    func identicalTwice() throws {
        let loop = EmbeddedEventLoop()
        let store = InMemoryResendRecordStore()
        try store.remember(
            [
                ResendRecord(key: Self.key(1), outcome: .accepted),
                ResendRecord(key: Self.key(1), outcome: .rejected(.invalidToken)),
            ],
            on: loop
        ).wait()
        #expect(try store.claim(Self.key(1), on: loop).wait() == .answered(.accepted))
        #expect(try store.claim(Self.key(1), on: loop).wait() == .answered(.rejected(.invalidToken)))
        #expect(try store.claim(Self.key(1), on: loop).wait() == .new)
    }

    @Test("A claim of a pending record waits for its outcome")
    func pending() throws {
        let loop = EmbeddedEventLoop()
        let store = InMemoryResendRecordStore()
        try store.remember([ResendRecord(key: Self.key(1), outcome: nil)], on: loop).wait()
        let claim = store.claim(Self.key(1), on: loop)
        let result = Mutex<ResendClaim?>(nil)
        claim.whenSuccess { outcome in result.withLock { $0 = outcome } }
        #expect(result.withLock { $0 } == nil)
        try store.resolve(Self.key(1), outcome: .rejected(.invalidToken), on: loop).wait()
        #expect(result.withLock { $0 } == .answered(.rejected(.invalidToken)))
    }

    @Test("An outcome the bridge decided is not kept: the resend is forwarded again, under the first id")
    func bridgeDecidedOutcome() throws {
        let loop = EmbeddedEventLoop()
        let store = InMemoryResendRecordStore()
        let first = ForwardedNotification.ID(high: 1, low: 2)
        let second = ForwardedNotification.ID(high: 3, low: 4)
        try store.remember(
            [
                ResendRecord(key: Self.key(1), outcome: nil, notificationID: first),
                ResendRecord(key: Self.key(2), outcome: .dropped, notificationID: second),
                ResendRecord(key: Self.key(3), outcome: .dropped),
            ],
            on: loop
        ).wait()
        let claim = store.claim(Self.key(1), on: loop)
        try store.resolve(Self.key(1), outcome: .gaveUp(.processingError), on: loop).wait()
        #expect(try claim.wait() == .outcomeUnknown(firstSentAs: first))
        #expect(try store.claim(Self.key(2), on: loop).wait() == .outcomeUnknown(firstSentAs: second))
        #expect(try store.claim(Self.key(3), on: loop).wait() == .outcomeUnknown(firstSentAs: nil))
    }

    @Test(
        "A claim's step: a new notification is sent, an answered one reported, one whose outcome is unknown sent again under its first id"
    )
    func claimSteps() throws {
        let notification = ForwardedNotification(
            tenant: Tenant(name: "t", topic: "com.example.app", environment: .sandbox),
            frame: NotificationFrame(
                command: .itemized,
                identifier: NotificationIdentifier(rawValue: 7),
                deviceToken: ByteBuffer(repeating: 1, count: 32),
                payload: ByteBuffer(string: "{}")
            )
        )
        let first = ForwardedNotification.ID(high: 1, low: 2)
        // The id a step sends under (a notification's equality leaves its id out).
        func sentID(_ step: ResendClaim.Step) -> ForwardedNotification.ID? {
            guard case .send(let sent, _) = step else { return nil }
            return sent.id
        }

        let new = ResendClaim.new.step(for: notification)
        #expect(new == .send(notification, forwardedAgain: false))
        #expect(sentID(new) == notification.id)

        #expect(
            ResendClaim.answered(.rejected(.invalidToken)).step(for: notification) == .report(.rejected(.invalidToken))
        )

        let again = ResendClaim.outcomeUnknown(firstSentAs: first).step(for: notification)
        #expect(again == .send(notification, forwardedAgain: true))
        #expect(sentID(again) == first, "under the first attempt's id")

        let renewed = ResendClaim.outcomeUnknown(firstSentAs: nil).step(for: notification)
        #expect(renewed == .send(notification, forwardedAgain: true))
        #expect(sentID(renewed) == notification.id, "a record without an id: the notification's own")
    }

    @Test("A pending outcome that never comes: after the window the resend is forwarded, never failed")
    func pendingNeverResolved() throws {
        let loop = EmbeddedEventLoop()
        let store = InMemoryResendRecordStore(window: .minutes(2))
        let id = ForwardedNotification.ID.next()
        try store.remember([ResendRecord(key: Self.key(1), outcome: nil, notificationID: id)], on: loop).wait()
        let claim = store.claim(Self.key(1), on: loop)
        loop.advanceTime(by: .minutes(2))
        #expect(try claim.wait() == .outcomeUnknown(firstSentAs: id))
    }

    @Test("Records expire after the window")
    func expiry() throws {
        let loop = EmbeddedEventLoop()
        let now = Mutex(NIODeadline.uptimeNanoseconds(1_000))
        let store = InMemoryResendRecordStore(window: .minutes(2), now: { now.withLock { $0 } })
        try store.remember(
            [ResendRecord(key: Self.key(1), outcome: .accepted), ResendRecord(key: Self.key(2), outcome: .accepted)],
            on: loop
        ).wait()
        now.withLock { $0 = $0 + .minutes(3) }
        #expect(try store.claim(Self.key(1), on: loop).wait() == .new)
        #expect(!store.mayHoldLiveRecords(tenant: "t"), "past the window, notifications skip the store")
        store.removeExpired()
        #expect(store.count == 0)
    }
}

extension ResendRecordStoreTests {
    @Test("Remembering sweeps records that expired without being claimed")
    func sweepOnRemember() throws {
        let loop = EmbeddedEventLoop()
        let now = Mutex(NIODeadline.uptimeNanoseconds(1_000))
        let store = InMemoryResendRecordStore(window: .minutes(2), now: { now.withLock { $0 } })
        try store.remember((1...50).map { ResendRecord(key: Self.key(UInt8($0)), outcome: .accepted) }, on: loop).wait()
        #expect(store.count == 50)
        now.withLock { $0 = $0 + .minutes(3) }
        try store.remember([ResendRecord(key: Self.key(99), outcome: .accepted)], on: loop).wait()
        #expect(store.count == 1)
    }
}

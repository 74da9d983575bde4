import BridgeCore
import LegacyProtocol
import NIOCore
import Testing

@Suite("Feedback list filter")
struct FeedbackListFilterTests {
    static let list = FeedbackListFilter.List(tenant: "com.example.a", environment: .production)

    static func token(_ number: UInt32) -> ByteBuffer {
        var token = ByteBuffer()
        token.writeInteger(number)
        token.writeRepeatingByte(0x5A, count: 28)
        return token
    }

    @Test("A token is on its own list only: not another tenant's, not another environment's")
    func perList() {
        let filter = FeedbackListFilter()
        #expect(!filter.mayContain(Self.token(1), on: Self.list))
        filter.insert(Self.token(1), on: Self.list)
        #expect(filter.mayContain(Self.token(1), on: Self.list))
        #expect(!filter.mayContain(Self.token(2), on: Self.list))
        #expect(!filter.mayContain(Self.token(1), on: .init(tenant: "com.example.b", environment: .production)))
        #expect(!filter.mayContain(Self.token(1), on: .init(tenant: "com.example.a", environment: .sandbox)))
    }

    @Test("A rebuild drops what the store no longer holds and keeps what was added while it read")
    func rebuild() async throws {
        let filter = FeedbackListFilter()
        for number in UInt32(0)..<4 { filter.insert(Self.token(number), on: Self.list) }
        try await filter.rebuild { found in
            found(Self.token(0), Self.list)
            #expect(
                filter.mayContain(Self.token(3), on: Self.list),
                "the old filter answers until the rebuild finishes"
            )
            filter.insert(Self.token(9), on: Self.list)  // a 410 while the store is being read
            found(Self.token(1), Self.list)
        }
        #expect((0..<10).filter { filter.mayContain(Self.token(UInt32($0)), on: Self.list) } == [0, 1, 9])
        #expect(filter.count == 3)
    }

    @Test("An abandoned rebuild leaves the filter as it was")
    func abandonedRebuild() async {
        struct StoreUnreadable: Error {}
        let filter = FeedbackListFilter()
        filter.insert(Self.token(1), on: Self.list)
        await #expect(throws: StoreUnreadable.self) {
            try await filter.rebuild { found in
                found(Self.token(2), Self.list)
                throw StoreUnreadable()
            }
        }
        #expect(filter.mayContain(Self.token(1), on: Self.list))
    }

    @Test("Fingerprints are the same in every process (64-bit FNV-1a of the token's bytes)")
    func stableFingerprint() {
        // FNV-1a 64 of no bytes is its offset basis; of "a" it is the published 0xaf63dc4c8601ec8c.
        #expect(FeedbackListFilter.fingerprint(ByteBuffer()) == 0xcbf2_9ce4_8422_2325)
        #expect(FeedbackListFilter.fingerprint(ByteBuffer(string: "a")) == 0xaf63_dc4c_8601_ec8c)
        var slice = ByteBuffer(string: "xxa")
        slice.moveReaderIndex(forwardBy: 2)
        #expect(FeedbackListFilter.fingerprint(slice) == 0xaf63_dc4c_8601_ec8c, "only the readable bytes count")
    }
}

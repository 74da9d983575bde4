import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The push log of one instance: the latest ``PushLogEntry`` of each legacy notification, in a
/// ring of fixed capacity that drops the oldest (docs/operations.md#did-it-go).
///
/// Written once per notification by the forwarder as its answer comes (on any event loop), read
/// by the admin port. One lock around an array of plain values: an entry is written in place,
/// so the ring allocates once, as it fills, and never again (docs/performance.md, "The push
/// log", has its cost per notification).
public final class PushLog: Sendable {
    private struct Ring {
        var entries: [PushLogEntry] = []
        /// Where the next entry goes once the ring is full.
        var next = 0
        var recorded: UInt64 = 0
    }

    /// Entries kept; the oldest goes when one more comes.
    public let capacity: Int
    /// Whether entries keep the whole device token (`pushLog.fullTokens`).
    public let keepsFullTokens: Bool
    private let ring: Mutex<Ring>

    public init(capacity: Int, keepsFullTokens: Bool = false) {
        precondition(capacity > 0, "a push log keeps at least one entry")
        self.capacity = capacity
        self.keepsFullTokens = keepsFullTokens
        self.ring = Mutex(Ring())
    }

    /// Keeps `entry`, numbered next, in place of the oldest when the ring is full.
    public func record(_ entry: PushLogEntry) {
        var entry = entry
        // The entry the ring drops is released after the lock: its strings' last release runs
        // outside it.
        let dropped: PushLogEntry? = self.ring.withLock { ring in
            ring.recorded += 1
            entry.sequence = ring.recorded
            if ring.entries.count < self.capacity {
                if ring.entries.isEmpty { ring.entries.reserveCapacity(self.capacity) }
                ring.entries.append(entry)
                return nil
            }
            let old = ring.entries[ring.next]
            ring.entries[ring.next] = entry
            ring.next = ring.next + 1 == self.capacity ? 0 : ring.next + 1
            return old
        }
        _ = dropped
    }

    /// Entries matching `query`, newest first.
    public func entries(matching query: PushLogQuery) -> [PushLogEntry] {
        guard query.limit > 0 else { return [] }
        return self.ring.withLock { ring in
            var found: [PushLogEntry] = []
            let count = ring.entries.count
            // Newest first: the one before `next` when full, else the last appended.
            var index = count < self.capacity ? count - 1 : (ring.next + count - 1) % count
            for _ in 0..<count {
                let entry = ring.entries[index]
                if query.matches(entry) {
                    found.append(entry)
                    if found.count == query.limit { break }
                }
                index = index == 0 ? count - 1 : index - 1
            }
            return found
        }
    }

    /// Entries held now, and recorded since the start.
    public var counts: (held: Int, recorded: UInt64) {
        self.ring.withLock { ($0.entries.count, $0.recorded) }
    }

    /// The wall clock in milliseconds since 1970, less `nanoseconds`: when something that took
    /// that long began.
    public static func milliseconds(before nanoseconds: Int64 = 0) -> UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let milliseconds = Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000 - nanoseconds / 1_000_000
        return UInt64(clamping: max(milliseconds, 0))
    }

    /// FNV-1a, 64 bits, of a token's bytes: how the log finds a token it does not print. Not
    /// a secret: 8 bytes of hash and 4 of prefix cannot give back a 32-byte token.
    public static func tokenHash(_ token: ByteBuffer) -> UInt64 {
        token.withUnsafeReadableBytes { Self.tokenHash($0) }
    }

    /// ``tokenHash(_:)`` of bytes as they are.
    public static func tokenHash(_ bytes: some Sequence<UInt8>) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3
        }
        return hash
    }
}

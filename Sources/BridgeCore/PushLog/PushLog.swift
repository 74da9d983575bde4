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
/// by the admin port. With ``keepsFailuresForStore``, a failure also waits apart from the ring
/// until the store's writer takes it, so that accepted notifications cannot push it out before
/// its copy. One lock around an array of plain values: an entry is swapped into place,
/// so the ring allocates once, as it fills, and the entry it drops is released after the lock.
/// Recording reads no clock: an entry's time is the monotonic one the client already read, turned
/// into wall-clock time when it is read (docs/performance.md, "The push log").
public final class PushLog: Sendable {
    private struct Ring {
        var entries: [PushLogEntry] = []
        /// Where the next entry goes once the ring is full.
        var next = 0
        var recorded: UInt64 = 0
        /// The failures the store's writer has not taken yet, oldest first (with
        /// ``PushLog/keepsFailuresForStore``), at most ``PushLog/capacity``.
        var unstored = CircularBuffer<PushLogEntry>()
        /// Failures dropped from `unstored` at its bound since the writer last took them.
        var unstoredDropped: UInt64 = 0
    }

    /// Entries kept; the oldest goes when one more comes.
    public let capacity: Int
    /// Whether entries keep the whole device token (`pushLog.fullTokens`).
    public let keepsFullTokens: Bool
    /// Whether failures also wait, apart from the ring, for the store's writer to take them
    /// (``takeUnstoredFailures()``): an accepted notification never does.
    public let keepsFailuresForStore: Bool
    /// This log's random number: with an entry's ``PushLogEntry/sequence``, it names the entry
    /// in the store (``StoredPushFailure``) across restarts and instances.
    public let run: UInt64
    private let ring: Mutex<Ring>

    public init(capacity: Int, keepsFullTokens: Bool = false, keepsFailuresForStore: Bool = false) {
        precondition(capacity > 0, "a push log keeps at least one entry")
        self.capacity = capacity
        self.keepsFullTokens = keepsFullTokens
        self.keepsFailuresForStore = keepsFailuresForStore
        var generator = SystemRandomNumberGenerator()
        self.run = generator.next()
        self.ring = Mutex(Ring())
    }

    /// Keeps `entry`, numbered next, in place of the oldest when the ring is full.
    public func record(_ entry: consuming PushLogEntry) {
        var entry = entry
        self.ring.withLock { ring in
            ring.recorded += 1
            entry.sequence = ring.recorded
            if self.keepsFailuresForStore, !entry.isAccepted {
                if ring.unstored.count == self.capacity {
                    ring.unstored.removeFirst()
                    ring.unstoredDropped += 1
                }
                ring.unstored.append(entry)
            }
            if ring.entries.count < self.capacity {
                if ring.entries.isEmpty { ring.entries.reserveCapacity(self.capacity) }
                ring.entries.append(entry)
                return
            }
            swap(&ring.entries[ring.next], &entry)
            ring.next = ring.next + 1 == self.capacity ? 0 : ring.next + 1
        }
        // `entry` holds the dropped one now (or a copy of the appended one): released here,
        // outside the lock.
    }

    /// Keeps an entry for `notification` that no answer of APNs fills in: answered from its
    /// resend record (`resendMatched`), or not sent at all (`failure` says why).
    public func record(
        _ notification: ForwardedNotification,
        outcome: NotificationOutcome,
        resendMatched: Bool = false,
        failure: String? = nil
    ) {
        self.record(
            PushLogEntry(
                notification,
                forwardedAt: .now(),
                keepingTokenBytes: self.keepsFullTokens,
                outcome: outcome,
                resendMatched: resendMatched,
                failure: failure
            )
        )
    }

    /// Entries matching `query`, newest first.
    public func entries(matching query: PushLogQuery) -> [PushLogEntry] {
        guard query.limit > 0 else { return [] }
        var query = query
        if let since = query.since {
            // Compared on the monotonic clock, as the entries keep their time.
            query.forwardedSince = Self.uptime(ofMilliseconds: since)
        }
        return self.ring.withLock { ring in
            var found: [PushLogEntry] = []
            let count = ring.entries.count
            // Newest first: the one before `next` when full, else the last appended.
            var index = count < self.capacity ? count - 1 : (ring.next + count - 1) % count
            for _ in 0..<count {
                if query.matches(ring.entries[index]) {
                    found.append(ring.entries[index])
                    if found.count == query.limit { break }
                }
                index = index == 0 ? count - 1 : index - 1
            }
            return found
        }
    }

    /// Takes the failures waiting for the store, oldest first (the store's writer does, for a
    /// ``PushFailureStore``); `dropped` counts those the bound (``capacity``) dropped since the
    /// last call.
    public func takeUnstoredFailures() -> (failures: CircularBuffer<PushLogEntry>, dropped: UInt64) {
        self.ring.withLock { ring in
            defer {
                ring.unstored = CircularBuffer()
                ring.unstoredDropped = 0
            }
            return (ring.unstored, ring.unstoredDropped)
        }
    }

    /// Puts failures the store refused back in front of those that came since, to be taken
    /// again; beyond the bound the oldest are dropped and counted.
    public func putBackUnstoredFailures(_ failures: some BidirectionalCollection<PushLogEntry>) {
        self.ring.withLock { ring in
            for entry in failures.reversed() {
                guard ring.unstored.count < self.capacity else {
                    ring.unstoredDropped += 1
                    continue
                }
                ring.unstored.prepend(entry)
            }
        }
    }

    /// Entries held now, and recorded since the start.
    public var counts: (held: Int, recorded: UInt64) {
        self.ring.withLock { ($0.entries.count, $0.recorded) }
    }

    // MARK: Time

    /// When `entry`'s notification was forwarded, in milliseconds since 1970: its monotonic
    /// time moved by the wall clock's distance from the monotonic one now. (A wall clock set
    /// back or forward since then moves the time shown with it.)
    public static func receivedMilliseconds(of entry: PushLogEntry) -> UInt64 {
        let (wall, uptime) = Self.clocks()
        let age = Int64(uptime) - Int64(entry.forwardedAt.uptimeNanoseconds)
        return UInt64(clamping: max(Int64(wall) - age / 1_000_000, 0))
    }

    /// The monotonic time of a wall-clock time (milliseconds since 1970).
    static func uptime(ofMilliseconds milliseconds: UInt64) -> NIODeadline {
        let (wall, uptime) = Self.clocks()
        let age = (Int64(wall) - Int64(clamping: milliseconds)) * 1_000_000
        return NIODeadline.uptimeNanoseconds(UInt64(clamping: max(Int64(uptime) - age, 0)))
    }

    /// The wall clock (milliseconds since 1970) and the monotonic one (nanoseconds), read together.
    private static func clocks() -> (wall: UInt64, uptime: UInt64) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let uptime = NIODeadline.now().uptimeNanoseconds
        return (UInt64(now.tv_sec) * 1000 + UInt64(now.tv_nsec) / 1_000_000, uptime)
    }

    // MARK: Tokens

    /// FNV-1a over a token's bytes, 8 at a time (a word, little-endian, then the bytes left):
    /// how the log finds a token it does not print. Not a secret: 8 bytes of hash and 4 of prefix
    /// cannot give back a 32-byte token. `apns-bridge log` computes the same over the bytes it
    /// is given (``tokenHash(_:)-(some Sequence<UInt8>)``).
    public static func tokenHash(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        let prime: UInt64 = 0x0000_0100_0000_01B3
        var offset = 0
        while offset + 8 <= bytes.count {
            hash = (hash ^ UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))) &* prime
            offset += 8
        }
        while offset < bytes.count {
            hash = (hash ^ UInt64(bytes[offset])) &* prime
            offset += 1
        }
        return hash
    }

    /// ``tokenHash(_:)-(UnsafeRawBufferPointer)`` of a token's readable bytes.
    public static func tokenHash(_ token: ByteBuffer) -> UInt64 {
        token.withUnsafeReadableBytes { Self.tokenHash($0) }
    }

    /// The same of bytes as they are.
    public static func tokenHash(_ bytes: some Sequence<UInt8>) -> UInt64 {
        Array(bytes).withUnsafeBytes { Self.tokenHash($0) }
    }
}

import Histogram
import NIOCore
import Synchronization

/// When each notification was written by its provider connection and when it reached the
/// upstream; counts arrivals per notification to find lost and duplicated ones.
///
/// Slots are written from several event loops at once, so each is an atomic.
final class ArrivalTracker: @unchecked Sendable {
    let count: Int
    private let sent: UnsafeMutablePointer<Atomic<UInt64>>
    private let arrived: UnsafeMutablePointer<Atomic<UInt64>>
    private let arrivals: UnsafeMutablePointer<Atomic<UInt32>>
    private let unknown = Atomic<Int>(0)
    private let total = Atomic<Int>(0)
    private let lastArrival = Atomic<UInt64>(0)

    init(count: Int) {
        self.count = count
        self.sent = .allocate(capacity: count)
        self.arrived = .allocate(capacity: count)
        self.arrivals = .allocate(capacity: count)
        for index in 0..<count {
            (self.sent + index).initialize(to: Atomic(0))
            (self.arrived + index).initialize(to: Atomic(0))
            (self.arrivals + index).initialize(to: Atomic(0))
        }
    }

    deinit {
        self.sent.deinitialize(count: self.count)
        self.arrived.deinitialize(count: self.count)
        self.arrivals.deinitialize(count: self.count)
        self.sent.deallocate()
        self.arrived.deallocate()
        self.arrivals.deallocate()
    }

    static var now: UInt64 { NIODeadline.now().uptimeNanoseconds }

    func markSent(_ id: Int, at time: UInt64) {
        self.sent[id].store(time, ordering: .relaxed)
    }

    /// Called by the upstream when notification `id` arrives (nil: not one of ours).
    func markArrived(_ id: Int?) {
        let now = Self.now
        guard let id, id >= 0, id < self.count else {
            self.unknown.wrappingAdd(1, ordering: .relaxed)
            return
        }
        if self.arrivals[id].wrappingAdd(1, ordering: .relaxed).oldValue == 0 {
            self.arrived[id].store(now, ordering: .relaxed)
        }
        self.total.wrappingAdd(1, ordering: .relaxed)
        self.lastArrival.store(now, ordering: .relaxed)
    }

    var arrivalsSoFar: Int { self.total.load(ordering: .relaxed) }
    var lastArrivalTime: UInt64 { self.lastArrival.load(ordering: .relaxed) }

    struct Summary {
        var delivered = 0
        var lost = 0
        var duplicated = 0
        var unknown = 0
        /// Microseconds from the frame's write to its arrival upstream.
        var latency = Histogram<UInt64>(highestTrackableValue: 120_000_000, numberOfSignificantValueDigits: .three)
    }

    /// Call once everything has arrived (or the wait gave up).
    func summary() -> Summary {
        var summary = Summary()
        summary.unknown = self.unknown.load(ordering: .relaxed)
        for id in 0..<self.count {
            let arrivals = Int(self.arrivals[id].load(ordering: .relaxed))
            if arrivals == 0 {
                summary.lost += 1
                continue
            }
            summary.delivered += 1
            summary.duplicated += arrivals - 1
            let sent = self.sent[id].load(ordering: .relaxed)
            let arrived = self.arrived[id].load(ordering: .relaxed)
            if sent > 0, arrived >= sent {
                _ = summary.latency.record((arrived - sent) / 1_000)
            }
        }
        return summary
    }
}

import CMallocStatistics
import CoreMetrics
import Foundation
import Logging
import Synchronization

/// Gives memory back to the system after a burst (docs/operations.md#memory-after-bursts).
///
/// A burst of connections or notifications grows the C allocator's arenas; when it is over, the
/// memory is freed but glibc keeps most of it in its arenas (only a free block at the very top
/// of the main heap is returned by itself), so the process's resident size stays where the
/// burst left it. Measured with 2,000 idle TLS connections: 39.5 → 152 MB, and still 152 MB
/// after they closed, almost all of it free memory in the arenas (docs/performance.md).
/// Every ``interval`` (30 s) the reclaimer reads the allocator's figures (`malloc_info`, every
/// arena) and, when it holds more than ``threshold`` free and the resident size grew by as much
/// since the last trim, calls `malloc_trim(0)`, which returns the free pages of every arena.
/// That takes a few milliseconds at most and happens only after memory was freed: free memory
/// already given back (still counted free by the allocator, but no longer resident) does not
/// call for another trim until a later burst makes it resident again.
package final class MemoryReclaimer: Sendable {
    /// How often the allocator is looked at.
    package static let interval: Duration = .seconds(30)
    /// Free memory held by the allocator beyond which it is given back.
    package let threshold: Int
    package let logger: Logger

    /// The resident size right after the last trim.
    private let residentAfterLastTrim = Mutex<Int?>(nil)
    /// What the C allocator holds (every arena): free (a trim can give it back) and in use.
    private let allocatorFree: CoreMetrics.Gauge
    private let allocatorInUse: CoreMetrics.Gauge
    private let trims: CoreMetrics.Counter

    /// - Parameters:
    ///   - threshold: free memory in the allocator beyond which a trim is worthwhile.
    ///   - metricsFactory: where the allocator gauges and the trim counter go.
    package init(threshold: Int = 16 << 20, logger: Logger, metricsFactory: any MetricsFactory = MetricsSystem.factory)
    {
        self.threshold = threshold
        self.logger = logger
        self.allocatorFree = CoreMetrics.Gauge(label: "apns_bridge_allocator_free_bytes", factory: metricsFactory)
        self.allocatorInUse = CoreMetrics.Gauge(label: "apns_bridge_allocator_in_use_bytes", factory: metricsFactory)
        self.trims = CoreMetrics.Counter(label: "apns_bridge_memory_trims_total", factory: metricsFactory)
    }

    /// What the allocator holds and the resident size, before and after one trim.
    package struct Trim: Sendable {
        package var freeBytes: Int
        package var inUseBytes: Int
        package var residentBytesBefore: Int?
        package var residentBytesAfter: Int?
    }

    /// Trims when the allocator holds more free memory than the threshold and the resident size
    /// grew by the threshold since the last trim; returns what it did.
    @discardableResult
    package func reclaimIfWorthwhile() -> Trim? {
        let statistics = apns_bridge_malloc_statistics_read()
        guard statistics.available == 1 else { return nil }
        self.allocatorFree.record(Int(statistics.free_bytes))
        self.allocatorInUse.record(Int(statistics.in_use_bytes))
        guard Int(statistics.free_bytes) >= self.threshold else { return nil }
        let before = Self.residentBytes()
        if let before, let last = self.residentAfterLastTrim.withLock({ $0 }), before < last + self.threshold {
            return nil  // given back already; nothing new became resident
        }
        _ = apns_bridge_malloc_trim()
        let trim = Trim(
            freeBytes: Int(statistics.free_bytes),
            inUseBytes: Int(statistics.in_use_bytes),
            residentBytesBefore: before,
            residentBytesAfter: Self.residentBytes()
        )
        self.residentAfterLastTrim.withLock { $0 = trim.residentBytesAfter }
        self.trims.increment()
        self.logger.info(
            "gave memory freed after a burst back to the system",
            metadata: [
                "allocator_free_kb": "\(trim.freeBytes >> 10)", "allocator_in_use_kb": "\(trim.inUseBytes >> 10)",
                "rss_before_kb": "\(trim.residentBytesBefore.map { "\($0 >> 10)" } ?? "?")",
                "rss_after_kb": "\(trim.residentBytesAfter.map { "\($0 >> 10)" } ?? "?")",
            ]
        )
        return trim
    }

    /// The resident set size from `/proc/self/statm` (Linux), in bytes.
    package static func residentBytes() -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return nil }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return nil }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}

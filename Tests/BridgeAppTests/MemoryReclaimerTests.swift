import BridgeApp
import Foundation
import Logging
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Memory after bursts: what a burst freed but the allocator kept is given
/// back to the system.
@Suite("Memory reclaimer")
struct MemoryReclaimerTests {
    @Test("After a burst freed in holes, the allocator's free memory is given back: the resident size falls")
    func givesFreedMemoryBack() throws {
        // 256 MiB in 1 KiB blocks, touched; then every block but one in 64 is freed, so the free
        // memory lies in holes that glibc keeps (only a free top of the heap goes back by itself).
        let count = 256 * 1024
        var blocks: [UnsafeMutableRawPointer] = []
        blocks.reserveCapacity(count)
        for _ in 0..<count {
            let block = try #require(malloc(1024))
            memset(block, 0xA5, 1024)
            blocks.append(block)
        }
        var kept: [UnsafeMutableRawPointer] = []
        for (index, block) in blocks.enumerated() {
            if index % 64 == 0 { kept.append(block) } else { free(block) }
        }
        defer {
            for block in kept { free(block) }
        }
        let reclaimer = MemoryReclaimer(logger: Logger(label: "apns-bridge.test"))
        let trim = try #require(reclaimer.reclaimIfWorthwhile(), "more than 16 MiB free in the allocator: it trims")
        #expect(trim.freeBytes >= 200 << 20)
        let before = try #require(trim.residentBytesBefore)
        let after = try #require(trim.residentBytesAfter)
        #expect(after < before - (128 << 20), "resident \(before >> 20) MiB before, \(after >> 20) MiB after")
        #expect(
            reclaimer.reclaimIfWorthwhile() == nil,
            "given back already: no second trim until more becomes resident"
        )
    }

    @Test("Below the threshold nothing is done")
    func quietBelowThreshold() {
        let reclaimer = MemoryReclaimer(threshold: Int.max, logger: Logger(label: "apns-bridge.test"))
        #expect(reclaimer.reclaimIfWorthwhile() == nil)
    }
}

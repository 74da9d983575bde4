import BridgeCore
import Synchronization
import Testing

/// The lock an SQLite store's transactions and configuration reloads take turns through: one
/// body at a time, across suspension points.
@Suite("Async serial lock")
struct AsyncSerialLockTests {
    /// What the bodies saw (a class: the group's closures share it).
    final class Ledger: Sendable {
        let inside = Mutex(0)
        let mostInside = Mutex(0)
        let ran = Mutex(0)
    }

    @Test("50 bodies that suspend inside the lock: never two inside at once, each runs once")
    func oneAtATime() async throws {
        let lock = AsyncSerialLock()
        let ledger = Ledger()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<50 {
                group.addTask {
                    await lock.withLock {
                        let now = ledger.inside.withLock { inside in
                            inside += 1
                            return inside
                        }
                        ledger.mostInside.withLock { $0 = max($0, now) }
                        for _ in 0..<5 { await Task.yield() }
                        ledger.inside.withLock { $0 -= 1 }
                        ledger.ran.withLock { $0 += 1 }
                    }
                }
            }
            await group.waitForAll()
        }
        #expect(ledger.mostInside.withLock { $0 } == 1)
        #expect(ledger.ran.withLock { $0 } == 50)
    }

    @Test("A body that throws gives the lock up: the next one runs")
    func throwingBody() async throws {
        struct Failed: Error {}
        let lock = AsyncSerialLock()
        await #expect(throws: Failed.self) {
            try await lock.withLock { throw Failed() }
        }
        #expect(await lock.withLock { 7 } == 7)
    }
}

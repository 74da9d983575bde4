import BridgeServer
import Synchronization
import Testing

/// The scope in which a listener's connection work runs (certificate checks, feedback drains):
/// every accepted job runs once, as a child of `run()`, and nothing is accepted after `finish()`.
@Suite("Connection tasks")
struct ConnectionTasksTests {
    /// Opens once; every `wait()` before or after returns then.
    final class Gate: Sendable {
        private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

        func open() {
            let waiters = self.state.withLock { state in
                state.open = true
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume() }
        }

        func wait() async {
            await withCheckedContinuation { continuation in
                let open = self.state.withLock { state in
                    if state.open { return true }
                    state.waiters.append(continuation)
                    return false
                }
                if open { continuation.resume() }
            }
        }
    }

    /// What the jobs did (a class: a `Mutex` captured by the group's closures must be shared).
    final class Ledger: Sendable {
        let ran = Mutex<[Int]>([])
        let accepted = Mutex(0)
    }

    @Test("Jobs run as children of run(); finish() refuses new ones and returns only when the running ones have ended")
    func runThenFinish() async {
        let tasks = ConnectionTasks()
        let ledger = Ledger()
        let release = Gate()
        let started = Gate()
        await withDiscardingTaskGroup { group in
            group.addTask { await tasks.run() }
            #expect(tasks.start { ledger.ran.withLock { $0.append(1) } })
            #expect(
                tasks.start {
                    started.open()
                    await release.wait()
                    ledger.ran.withLock { $0.append(2) }
                }
            )
            await started.wait()
            group.addTask {
                await tasks.finish()
                // finish() returned: the held job has ended.
                #expect(ledger.ran.withLock { $0.contains(2) })
            }
            // Refused once finish() has begun; wait for that, without a sleep.
            while tasks.start({ ledger.ran.withLock { $0.append(3) } }) {
                ledger.accepted.withLock { $0 += 1 }
                await Task.yield()
            }
            release.open()
        }
        let jobs = ledger.ran.withLock { $0 }
        #expect(jobs.contains(1) && jobs.contains(2))
        #expect(
            jobs.filter { $0 == 3 }.count == ledger.accepted.withLock { $0 },
            "every job accepted before finish() ran once; none after"
        )
    }

    @Test("Without run(), finish() runs what was accepted, so no job is ever dropped")
    func finishWithoutRun() async {
        let tasks = ConnectionTasks()
        let ran = Mutex(0)
        for _ in 0..<5 {
            #expect(tasks.start { ran.withLock { $0 += 1 } })
        }
        await tasks.finish()
        #expect(ran.withLock { $0 } == 5)
        #expect(!tasks.start { ran.withLock { $0 += 1 } })
        await tasks.run()  // returns at once: finished, nothing queued
        await tasks.finish()  // a second finish() returns too
        #expect(ran.withLock { $0 } == 5)
    }
}

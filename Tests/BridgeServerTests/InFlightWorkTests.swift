import BridgeServer
import Testing

/// The gateway's count of work started and not finished, which graceful shutdown waits for.
@Suite("In-flight work")
struct InFlightWorkTests {
    @Test("The wait returns true once the count reaches zero, false at its timeout while work is left")
    func waitsForZero() async throws {
        let work = InFlightWork()
        #expect(await work.waitUntilIdle(timeout: .seconds(60)), "nothing started: idle at once")
        work.started()
        work.started()
        #expect(!(await work.waitUntilIdle(timeout: .milliseconds(10))), "two in flight: the timeout ends the wait")
        let waiter = Task { await work.waitUntilIdle(timeout: .seconds(3600)) }
        work.finished()
        #expect(work.count == 1)
        work.finished()
        #expect(await waiter.value, "the last finish ends the wait")
    }

    @Test("A cancelled wait returns at once, with work still in flight")
    func cancelledWait() async throws {
        let work = InFlightWork()
        work.started()
        let waiter = Task { await work.waitUntilIdle(timeout: .seconds(3600)) }
        waiter.cancel()
        #expect(!(await waiter.value))
        work.finished()
    }
}

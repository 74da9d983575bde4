/// One piece of a store's background work (the PostgreSQL client's run, its LISTEN for other
/// instances' entries, the instance heartbeat): run where its owner decides (a child task of
/// ``BridgeStoreLocation/withStore(_:configuration:logger:_:)``'s scope in the bridge; a task of
/// its own for a store the tests open without a scope), and stopped, and waited for,
/// by the store's `close()`, in the order the store needs.
package final class BackgroundWork: Sendable {
    private let work: @Sendable () async -> Void
    private let stopSignal: AsyncStream<Void>
    private let stopContinuation: AsyncStream<Void>.Continuation
    private let finished: AsyncStream<Void>
    private let finishedContinuation: AsyncStream<Void>.Continuation

    init(_ work: @escaping @Sendable () async -> Void) {
        self.work = work
        (self.stopSignal, self.stopContinuation) = AsyncStream.makeStream(of: Void.self)
        (self.finished, self.finishedContinuation) = AsyncStream.makeStream(of: Void.self)
    }

    /// Runs the work until it returns, ``stop()`` is called or the calling task is cancelled
    /// (the work is cancelled then). Called once.
    package func run() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.work() }
            group.addTask {
                for await _ in self.stopSignal {}
            }
            _ = await group.next()
            group.cancelAll()
        }
        self.finishedContinuation.finish()
    }

    /// Stops the work and returns once ``run()`` has returned. Called once, after ``run()``
    /// was started.
    func stop() async {
        self.stopContinuation.finish()
        for await _ in self.finished {}
    }
}

import Synchronization

/// Runs the bodies handed to ``run(_:)`` one after another, in the order they asked, across
/// tasks: a lock that waits without blocking a thread.
public final class OneAtATime: Sendable {
    private struct State {
        var busy = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    public init() {}

    public func run<Result>(_ body: () async throws -> Result) async throws -> Result {
        await withCheckedContinuation { (turn: CheckedContinuation<Void, Never>) in
            let now = self.state.withLock { state in
                guard state.busy else {
                    state.busy = true
                    return true
                }
                state.waiting.append(turn)
                return false
            }
            if now { turn.resume() }
        }
        defer {
            let next = self.state.withLock { state -> CheckedContinuation<Void, Never>? in
                guard !state.waiting.isEmpty else {
                    state.busy = false
                    return nil
                }
                return state.waiting.removeFirst()
            }
            next?.resume()
        }
        return try await body()
    }
}

import BridgeServer
import NIOCore
import Synchronization

/// The listening sockets of `serve`, each bound inside its own service's `run()`
/// (``ListenerService``): the gateway, the feedback service and the admin port. Whoever needs a
/// bound server reads it here (the reloader's review of open connections, the status page's
/// count), and ``BridgeRuntime`` waits here for the event "every listener is up"
/// (``allListening()``) before it hands the running bridge to `ready`.
final class ListenerSet: Sendable {
    private struct State {
        var gateway: GatewayServer?
        var feedback: FeedbackServer?
        var admin: AdminServer?
        /// The first listener that could not bind: the event never comes.
        var failure: (any Error)?
        var waiters: [Int: CheckedContinuation<Void, any Error>] = [:]
        var nextWaiter = 0
    }

    private let expectsAdmin: Bool
    private let state = Mutex(State())

    init(expectsAdmin: Bool) {
        self.expectsAdmin = expectsAdmin
    }

    var gateway: GatewayServer? { self.state.withLock { $0.gateway } }
    var feedback: FeedbackServer? { self.state.withLock { $0.feedback } }

    func listening(_ gateway: GatewayServer) { self.update { $0.gateway = gateway } }
    func listening(_ feedback: FeedbackServer) { self.update { $0.feedback = feedback } }
    func listening(_ admin: AdminServer) { self.update { $0.admin = admin } }

    /// A listener could not bind: whoever waits for ``allListening()`` gets `error`.
    func failed(_ error: any Error) {
        self.update { state in
            if state.failure == nil { state.failure = error }
        }
    }

    /// Returns once every listener is bound (their addresses), or throws the first failure to
    /// bind; a cancelled wait throws `CancellationError`.
    func allListening() async throws -> ListeningAddresses {
        let id = self.state.withLock { state -> Int in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                self.state.withLock { state in
                    if Task.isCancelled {
                        continuation.resume(throwing: CancellationError())
                    } else if let failure = state.failure {
                        continuation.resume(throwing: failure)
                    } else if self.isComplete(state) {
                        continuation.resume()
                    } else {
                        state.waiters[id] = continuation
                    }
                }
            }
        } onCancel: {
            self.state.withLock { $0.waiters.removeValue(forKey: id) }?.resume(throwing: CancellationError())
        }
        return self.state.withLock { state in
            ListeningAddresses(
                gateway: state.gateway!.localAddress,
                feedback: state.feedback!.localAddress,
                admin: state.admin?.localAddress
            )
        }
    }

    private func isComplete(_ state: State) -> Bool {
        state.gateway != nil && state.feedback != nil && (!self.expectsAdmin || state.admin != nil)
    }

    private func update(_ change: (inout State) -> Void) {
        let (waiters, result): ([CheckedContinuation<Void, any Error>], Result<Void, any Error>?) = self.state.withLock
        { state in
            change(&state)
            let result: Result<Void, any Error>?
            if let failure = state.failure {
                result = .failure(failure)
            } else if self.isComplete(state) {
                result = .success(())
            } else {
                result = nil
            }
            guard result != nil else { return ([], nil) }
            defer { state.waiters = [:] }
            return (Array(state.waiters.values), result)
        }
        if let result {
            for waiter in waiters { waiter.resume(with: result) }
        }
    }
}

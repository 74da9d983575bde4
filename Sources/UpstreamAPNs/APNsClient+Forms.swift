import NIOCore
import NIOPosix

/// The other forms of ``APNsClient``'s `send`, each over the completion form with a summary.
extension APNsClient {
    /// Sends one request, with the client's retries, and returns its result: an answer (a 200 or
    /// APNs' refusal) or the reason there is none. It never throws; a task cancelled while it
    /// waits still gets the result, since a request on the wire cannot be called back.
    public func send(_ request: APNsRequest) async -> APNsSendResult {
        let eventLoop = MultiThreadedEventLoopGroup.currentEventLoop ?? self.eventLoops[0]
        return await withCheckedContinuation { continuation in
            self.send(request, on: eventLoop) { result, _ in continuation.resume(returning: result) }
        }
    }

    /// Sends one request, with the client's retries; the future always succeeds, on `eventLoop`.
    public func send(_ request: APNsRequest, on eventLoop: any EventLoop) -> EventLoopFuture<APNsSendResult> {
        let promise = eventLoop.makePromise(of: APNsSendResult.self)
        self.send(request, on: eventLoop) { result, _ in promise.succeed(result) }
        return promise.futureResult
    }

    /// Sends one request, with the client's retries, and calls `completion` once with the
    /// result: on the event loop of the connection that answered (`eventLoop` itself while its
    /// pool has room), or on `eventLoop` when no connection did. No future is made: for callers
    /// that have their own.
    public func send(
        _ request: APNsRequest,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (APNsSendResult) -> Void
    ) {
        self.send(request, on: eventLoop) { result, _ in completion(result) }
    }
}

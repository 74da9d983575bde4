/// A closure as an ``APNsStreamOwner``, for callers with no object of their own (the engine
/// fuzzing harness).
package final class APNsStreamCallback: APNsStreamOwner {
    private let body: APNsResponseHandler

    package init(_ body: @escaping APNsResponseHandler) {
        self.body = body
    }

    package func streamEnded(_ result: Result<APNsResponse, APNsStreamFailure>, onConnection connectionID: Int) {
        self.body(result)
    }
}

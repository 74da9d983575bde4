/// Whoever hears how one request's stream ended: called once, on the connection's event loop.
///
/// An object, not a closure: the client's one object per request (``APNsRequestInFlight``)
/// goes down to the stream and is called back itself, where a closure made at each layer
/// (client, pool, connection) cost an allocation and a retain of each capture per request.
package protocol APNsStreamOwner: AnyObject, Sendable {
    /// The stream ended on connection `connectionID` (the pool's number for it).
    func streamEnded(_ result: Result<APNsResponse, APNsStreamFailure>, onConnection connectionID: Int)
}

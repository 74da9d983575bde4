import NIOCore

/// What ``APNsConnection`` needs of either engine's handler, on the connection's event loop.
package protocol APNsConnectionDriver: AnyObject {
    func setEvents(_ events: APNsConnectionHandler.Events)
    func send(
        _ request: APNsRequest,
        authorization: String?,
        deadline: NIODeadline,
        completion: @escaping APNsResponseHandler
    )
}

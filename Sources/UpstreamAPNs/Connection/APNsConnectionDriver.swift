import NIOCore

/// What ``APNsConnection`` needs of a connection, on its event loop: the
/// ``APNsConnectionCore`` of either engine's handler.
package protocol APNsConnectionDriver: AnyObject {
    func setEvents(_ events: APNsConnectionEvents)
    func send(
        _ request: APNsRequest,
        authorization: String?,
        deadline: NIODeadline,
        owner: any APNsStreamOwner
    )
}

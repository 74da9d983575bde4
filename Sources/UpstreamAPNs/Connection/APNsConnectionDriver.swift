import NIOCore

/// What ``APNsConnection`` needs of a connection, on its event loop: the
/// ``APNsConnectionCore`` of either engine's handler.
///
/// The core is its only implementation; the protocol exists because the core is generic over
/// its engine's ``APNsConnectionTransport`` (so that its calls into the engine are specialized),
/// and a connection holds either engine's core.
package protocol APNsConnectionDriver: AnyObject {
    func setEvents(_ events: APNsConnectionEvents)
    func send(
        _ request: APNsRequest,
        authorization: String?,
        deadline: NIODeadline,
        owner: any APNsStreamOwner
    )
}

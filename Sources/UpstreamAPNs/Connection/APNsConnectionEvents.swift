/// What a connection tells its pool, on the connection's event loop.
package struct APNsConnectionEvents {
    /// The number of streams the connection takes changed (the server's SETTINGS, a GOAWAY).
    package var limitChanged: (Int) -> Void
    /// The connection closed.
    package var closed: () -> Void

    package init(limitChanged: @escaping (Int) -> Void, closed: @escaping () -> Void) {
        self.limitChanged = limitChanged
        self.closed = closed
    }
}

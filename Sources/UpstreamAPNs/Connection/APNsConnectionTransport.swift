import NIOCore
import NIOHTTP2

/// What ``APNsConnectionCore`` asks of an HTTP/2 engine: the frames to write, the flush, the
/// close. Each engine's handler is one (``APNsConnectionHandler`` over NIOHTTP2,
/// ``NGHTTP2ConnectionHandler`` over libnghttp2); the core calls it on the connection's event
/// loop, never while the engine is inside its own parser.
package protocol APNsConnectionTransport: AnyObject {
    /// Queues the request on `streamID` (HEADERS, and DATA for a body); `false` if the engine
    /// could not take it (the core then fails it as refused by the stream).
    func writeRequest(_ request: APNsRequest, authorization: String?, on streamID: HTTP2StreamID) -> Bool
    /// Queues RST_STREAM CANCEL for a stream whose deadline passed.
    func resetStream(_ streamID: HTTP2StreamID)
    /// Queues a PING.
    func writePing(_ data: HTTP2PingData)
    /// Writes out and flushes what was queued.
    func flush()
    /// Closes the connection, after writing what is queued.
    func close()
}

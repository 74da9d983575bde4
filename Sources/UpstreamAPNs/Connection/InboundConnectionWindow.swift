import NIOCore
import NIOHTTP2

/// Keeps the connection-level inbound flow-control window of an HTTP/2 connection open.
///
/// `NIOHTTP2Handler` without a stream multiplexer (how the client and the mock use it, to avoid
/// a child channel per stream) leaves the connection window to the handler after it: if nobody
/// sends WINDOW_UPDATE on stream 0, the peer stops sending DATA once 65,535 bytes of bodies have
/// arrived in all, and every later stream stalls. Stream windows need no care here: every
/// stream is new and its body is far below the initial 65,535 bytes.
package struct InboundConnectionWindow: Sendable {
    private let size: Int
    private var consumed = 0

    package init(size: Int = 65_535) {
        self.size = size
    }

    /// Counts one DATA frame; returns the WINDOW_UPDATE increment to send, if it is time.
    package mutating func received(_ data: HTTP2Frame.FramePayload.Data) -> Int? {
        self.consumed += data.data.readableBytes + (data.paddingBytes.map { $0 + 1 } ?? 0)
        guard self.consumed >= self.size / 2 else { return nil }
        defer { self.consumed = 0 }
        return self.consumed
    }

    /// Counts one DATA frame; returns the WINDOW_UPDATE frame (stream 0) to send, if it is time.
    package mutating func windowUpdate(afterReceiving data: HTTP2Frame.FramePayload.Data) -> HTTP2Frame? {
        self.received(data).map { HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: $0)) }
    }
}

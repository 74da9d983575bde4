import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOTLS

/// The NIOHTTP2 engine: drives one HTTP/2 connection to APNs at the frame level. It sits after
/// `NIOHTTP2Handler` (without a stream multiplexer, so no child channel per stream), opens a
/// stream per request, and hands each answer's frames to the connection's
/// ``APNsConnectionCore``.
///
/// The core (state machine, timers, the pool's events) is the one the libnghttp2 engine
/// (``NGHTTP2ConnectionHandler``) runs too; this handler only translates `HTTP2Frame`s into the
/// core's events and writes the frames the core asks for (``APNsConnectionTransport``). What it
/// keeps itself is NIOHTTP2's: the header block (HPACK indexing per connection) and the
/// connection's inbound flow-control window.
package final class APNsConnectionHandler: ChannelInboundHandler {
    package typealias InboundIn = HTTP2Frame
    package typealias OutboundOut = HTTP2Frame

    /// What the connection is: ``APNsConnection`` sends through it.
    package let core: APNsConnectionCore<APNsConnectionHandler>
    private var context: ChannelHandlerContext?
    private var headerEncoder: APNsRequestHeaderEncoder
    private var inboundWindow = InboundConnectionWindow()

    package init(
        connectionID: Int,
        configuration: APNsConnectionConfiguration,
        readyPromise: EventLoopPromise<Void>,
        logger: Logger
    ) {
        self.core = APNsConnectionCore(
            connectionID: connectionID,
            configuration: configuration,
            readyPromise: readyPromise,
            logger: logger
        )
        self.headerEncoder = APNsRequestHeaderEncoder(authority: configuration.authority)
    }

    // MARK: Channel events

    package func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        self.core.attach(self, eventLoop: context.eventLoop)
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    package func channelActive(context: ChannelHandlerContext) {
        self.core.channelActive()
        context.fireChannelActive()
    }

    package func channelInactive(context: ChannelHandlerContext) {
        self.core.channelInactive()
        context.fireChannelInactive()
    }

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted(let negotiated) = tlsEvent {
            self.core.handshakeCompleted(negotiatedProtocol: negotiated)
        } else if let closed = event as? StreamClosedEvent {
            self.core.streamClosed(closed.streamID, reason: closed.reason)
        }
        context.fireUserInboundEventTriggered(event)
    }

    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.core.logger.debug("upstream connection error", metadata: ["error": "\(error)"])
        if error is NIOHTTP2Errors.StreamClosed || error is NIOHTTP2Errors.NoSuchStream {
            return  // a late frame for a finished stream: harmless
        }
        context.close(promise: nil)
    }

    package func channelReadComplete(context: ChannelHandlerContext) {
        self.core.endBatch()
        context.fireChannelReadComplete()
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.core.beginBatch()  // the frames of one read, until channelReadComplete
        let frame = self.unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            let status = headers.headers.first(name: ":status").flatMap { Int($0) }
            self.core.headersReceived(
                on: frame.streamID,
                status: status,
                apnsID: status == nil
                    ? nil : headers.headers.first(name: "apns-id") ?? headers.headers.first(name: "apns-request-id"),
                uniqueID: status == nil ? nil : headers.headers.first(name: "apns-unique-id"),
                channelID: status == nil ? nil : headers.headers.first(name: "apns-channel-id"),
                endStream: headers.endStream
            )
        case .data(let data):
            if let update = self.inboundWindow.windowUpdate(afterReceiving: data) {
                context.write(self.wrapOutboundOut(update), promise: nil)
                self.core.scheduleFlush()
            }
            if case .byteBuffer(let bytes) = data.data {
                self.core.dataReceived(on: frame.streamID, bytes, endStream: data.endStream)
            }
        case .settings(.settings(let settings)):
            self.core.settingsReceived(
                maximumConcurrentStreams: settings.last { $0.parameter == .maxConcurrentStreams }.map(\.value)
            )
        case .ping(_, ack: true):
            self.core.pingAcknowledged()
        case .goAway(let lastStreamID, let errorCode, let debugData):
            self.core.goAwayReceived(lastStreamID: lastStreamID, errorCode: errorCode, debugData: debugData)
        default:
            break
        }
    }
}

extension APNsConnectionHandler: APNsConnectionTransport {
    package func writeRequest(_ request: APNsRequest, authorization: String?, on streamID: HTTP2StreamID) -> Bool {
        guard let context else { return false }
        let headers = self.headerEncoder.headers(for: request, authorization: authorization)
        let hasBody = request.payload.readableBytes > 0
        context.write(
            self.wrapOutboundOut(
                HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: !hasBody)))
            ),
            promise: nil
        )
        if hasBody {
            context.write(
                self.wrapOutboundOut(
                    HTTP2Frame(
                        streamID: streamID,
                        payload: .data(.init(data: .byteBuffer(request.payload), endStream: true))
                    )
                ),
                promise: nil
            )
        }
        return true
    }

    package func resetStream(_ streamID: HTTP2StreamID) {
        self.context?.write(
            self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.cancel))),
            promise: nil
        )
    }

    package func writePing(_ data: HTTP2PingData) {
        self.context?.write(
            self.wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .ping(data, ack: false))),
            promise: nil
        )
    }

    package func flush() {
        self.context?.flush()
    }

    package func close() {
        self.context?.close(promise: nil)
    }
}

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

#if NGHTTP2Engine
import CNghttp2
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOTLS

// Over 400 lines, on purpose: libnghttp2's C callbacks reach the handler's private state (the
// stream table, the read's completions, the payloads being sent) through one unmanaged pointer,
// and that state is file-private; splitting the callbacks into another file would make it
// internal to the whole module.

/// Drives one HTTP/2 connection to APNs with libnghttp2 (the `NGHTTP2Engine` trait): it sits
/// right after NIOSSL, feeds the bytes it reads to an nghttp2 client session in memory mode
/// (`nghttp2_session_mem_recv`) and writes what the session has to send
/// (`nghttp2_session_mem_send`) in one buffer per batch.
///
/// The connection's state, timers and pool events are the same ``APNsConnectionCore`` the
/// NIOHTTP2 engine (``APNsConnectionHandler``) runs, so both behave alike: stream credits,
/// GOAWAY, PING health, refused streams, deadlines. This handler translates nghttp2's callbacks
/// into the core's events and writes what the core asks for (``APNsConnectionTransport``). The
/// header block comes from the same
/// ``APNsRequestHeaderEncoder`` (HPACK indexing as Apple asks: `.indexable` becomes an
/// nghttp2 field without flags, the other two `NGHTTP2_NV_FLAG_NO_INDEX`).
///
/// Rules at the C boundary (docs/upstream.md, "The libnghttp2 engine"):
/// - nghttp2's callbacks only feed the core, inside a batch (``APNsConnectionCore/beginBatch()``):
///   what they decide runs after `mem_recv` or `mem_send` returned, because a completion may
///   send the next request on this connection or close it, and nghttp2 must never be
///   re-entered (`inNghttp2` asserts it).
/// - What nghttp2 hands to a callback lives only during the callback: it is copied.
/// - A request's body stays in ``payloads`` until nghttp2 has read it all or closed the stream.
/// - The session points at this handler unretained, so it is deleted in `handlerRemoved`.
package final class NGHTTP2ConnectionHandler: ChannelInboundHandler {
    package typealias InboundIn = ByteBuffer
    package typealias OutboundOut = ByteBuffer

    /// The answer headers of one stream, collected field by field until its block ends.
    private struct Answer {
        var status: Int?
        var apnsID: String?
        var uniqueID: String?
        var channelID: String?
    }

    /// What the connection is: ``APNsConnection`` sends through it.
    package let core: APNsConnectionCore<NGHTTP2ConnectionHandler>
    private var context: ChannelHandlerContext?
    private var headerEncoder: APNsRequestHeaderEncoder
    private var session: OpaquePointer?
    /// Bodies nghttp2 has not read in full yet, by stream.
    private var payloads = StreamTable<Int32, ByteBuffer>()
    /// The answer whose header block is being read, and its stream. HTTP/2 sends a header block
    /// in one piece (HEADERS and its CONTINUATIONs, no other frame between them), so one slot
    /// serves every stream: no dictionary, and no hashing, per header.
    private var answerStreamID: Int32 = 0
    private var answer = Answer()
    /// Set while nghttp2 runs (`mem_recv`, `mem_send`): it must not be called again then.
    private var inNghttp2 = false
    /// One request's header fields, its memory kept between requests (``submit``).
    private var headerBlock = NGHTTP2HeaderBlock()

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

    deinit {
        self.headerBlock.deallocate()
    }

    // MARK: Requests

    /// `nghttp2_submit_request` with the header block as name/value pairs (nghttp2 copies them)
    /// and, for a body, a data provider that reads ``payloads``. The fields come from the
    /// shared ``APNsRequestHeaderEncoder`` straight into the ``NGHTTP2HeaderBlock`` the handler
    /// keeps: no `HPACKHeaders` is built, no name is copied, and nothing is allocated per request
    /// once its buffer has grown.
    /// Returns the stream id, or a negative nghttp2 error.
    private func submit(
        _ request: APNsRequest,
        authorization: String?,
        hasBody: Bool,
        to session: OpaquePointer
    ) -> Int32 {
        // A local copy for the call (the block is pointers and counts): a class's stored
        // property written from a closure costs a dynamic exclusivity check per access.
        var block = self.headerBlock
        defer { self.headerBlock = block }
        block.removeAll()
        self.headerEncoder.forEachField(of: request, authorization: authorization) { name, value, indexing in
            block.append(name: name, value: value, indexing: indexing)
        }
        guard hasBody else {
            return nghttp2_submit_request(session, nil, block.fields, block.count, nil, nil)
        }
        var provider = nghttp2_data_provider()
        provider.read_callback = { _, streamID, buffer, length, flags, _, userData in
            NGHTTP2ConnectionHandler.with(userData) { handler in
                handler.readBody(of: streamID, into: buffer!, length: length, flags: flags!)
            }
        }
        return nghttp2_submit_request(session, nil, block.fields, block.count, &provider, nil)
    }

    /// nghttp2 asks for (more of) a body: copied from ``payloads``, the end marked once empty.
    private func readBody(
        of streamID: Int32,
        into buffer: UnsafeMutablePointer<UInt8>,
        length: Int,
        flags: UnsafeMutablePointer<UInt32>
    ) -> Int {
        // One lookup; the payload is read and removed at its index.
        guard let index = self.payloads.index(of: streamID) else {
            flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
            return 0
        }
        let count = min(length, self.payloads[index].readableBytes)
        self.payloads[index].readWithUnsafeReadableBytes { bytes in
            UnsafeMutableRawPointer(buffer).copyMemory(from: bytes.baseAddress!, byteCount: count)
            return count
        }
        if self.payloads[index].readableBytes == 0 {
            flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
            _ = self.payloads.remove(at: index)
        }
        return count
    }

    /// Everything nghttp2 has to send, in one buffer, one write and one flush.
    private func flushOutput() {
        guard let context, let session else { return }
        precondition(!self.inNghttp2, "nghttp2 re-entered")
        var output: ByteBuffer?
        // Sending can close streams (a RST_STREAM nghttp2 decided on while reading is sent now,
        // and only then is its stream closed): what that decides runs once it has returned.
        let batch = self.core.beginBatch()
        self.inNghttp2 = true
        var failed: Int?
        while true {
            var chunk: UnsafePointer<UInt8>?
            let count = nghttp2_session_mem_send(session, &chunk)
            if count <= 0 {
                if count < 0 { failed = count }
                break
            }
            if output == nil {
                output = context.channel.allocator.buffer(capacity: max(Int(count), 1024))
            }
            output!.writeBytes(UnsafeRawBufferPointer(start: chunk, count: Int(count)))
        }
        self.inNghttp2 = false
        if let output {
            context.writeAndFlush(self.wrapOutboundOut(output), promise: nil)
        }
        if batch { self.core.endBatch() }
        if let failed {
            self.core.engineStopped(.sendFailed(Self.errorText(Int32(failed))))
            return
        }
        // nghttp2 is done with the connection (it sent GOAWAY for a protocol error, or both
        // sides said goodbye), and what it had to say is written.
        if let session = self.session, nghttp2_session_want_read(session) == 0,
            nghttp2_session_want_write(session) == 0,
            context.channel.isActive
        {
            self.core.engineStopped(.engineFinished)
        }
    }

    // MARK: Channel events

    package func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        self.session = self.makeSession()
        self.core.attach(self, eventLoop: context.eventLoop)
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        if let session {
            nghttp2_session_del(session)
            self.session = nil
        }
        self.payloads.removeAll()
    }

    package func channelActive(context: ChannelHandlerContext) {
        self.core.channelActive()
        self.flushOutput()  // the connection preface and our SETTINGS (NIOSSL holds them until the handshake)
        context.fireChannelActive()
    }

    package func channelInactive(context: ChannelHandlerContext) {
        self.payloads.removeAll()
        self.core.channelInactive()
        context.fireChannelInactive()
    }

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted(let negotiated) = tlsEvent {
            self.core.handshakeCompleted(negotiatedProtocol: negotiated)
        }
        context.fireUserInboundEventTriggered(event)
    }

    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.core.logger.debug("upstream connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let bytes = self.unwrapInboundIn(data)
        guard let session else { return }
        precondition(!self.inNghttp2, "nghttp2 re-entered")
        let batch = self.core.beginBatch()
        self.inNghttp2 = true
        let consumed = bytes.withUnsafeReadableBytes { raw in
            nghttp2_session_mem_recv(session, raw.bindMemory(to: UInt8.self).baseAddress, raw.count)
        }
        self.inNghttp2 = false
        if batch { self.core.endBatch() }
        if consumed < 0 {
            self.core.engineStopped(.protocolError(Self.errorText(Int32(consumed))))
            return
        }
        if let session = self.session, nghttp2_session_want_read(session) == 0 {
            self.flushOutput()  // its GOAWAY, then the close
        }
    }

    package func channelReadComplete(context: ChannelHandlerContext) {
        self.flushOutput()  // SETTINGS and PING acknowledgements, WINDOW_UPDATEs
        context.fireChannelReadComplete()
    }

    // MARK: nghttp2's callbacks (state machine and bookkeeping only)

    /// Lends the handler behind nghttp2's `user_data` to `body` without a retain and a release
    /// per callback (docs/performance-log.md, "The handler lent to nghttp2's callbacks"): nghttp2
    /// calls back only from inside the handler's own calls into the session, so the handler is
    /// alive for the whole callback.
    private static func with<Result>(
        _ userData: UnsafeMutableRawPointer?,
        _ body: (NGHTTP2ConnectionHandler) -> Result
    ) -> Result {
        Unmanaged<NGHTTP2ConnectionHandler>.fromOpaque(userData!)._withUnsafeGuaranteedRef(body)
    }

    private func makeSession() -> OpaquePointer? {
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0 else { return nil }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_header_callback(callbacks) {
            _,
            frame,
            name,
            nameLength,
            value,
            valueLength,
            _,
            userData in
            NGHTTP2ConnectionHandler.with(userData) { handler in
                handler.headerReceived(
                    frame!,
                    name: name!,
                    nameLength: nameLength,
                    value: value!,
                    valueLength: valueLength
                )
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks) { _, frame, userData in
            NGHTTP2ConnectionHandler.with(userData) { $0.frameReceived(frame!) }
            return 0
        }
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks) { _, _, streamID, data, length, userData in
            NGHTTP2ConnectionHandler.with(userData) { handler in
                handler.dataReceived(on: streamID, UnsafeRawBufferPointer(start: data, count: length))
            }
            return 0
        }
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks) { _, streamID, errorCode, userData in
            NGHTTP2ConnectionHandler.with(userData) { $0.streamClosed(streamID, errorCode: errorCode) }
            return 0
        }
        var session: OpaquePointer?
        let userData = Unmanaged.passUnretained(self).toOpaque()
        // Without nghttp2's HTTP messaging checks (content-length against the body, header
        // names and values, pseudo-header order), as the NIOHTTP2 engine runs without NIOHTTP2's
        // (APNsConnection): both engines read an answer field by field, bodies cut at a bound,
        // so the same bytes from an upstream give the same result on either. With them, a 400
        // whose content-length disagreed with its body was a stream reset here (status 255)
        // and an answer there (status 8).
        var options: OpaquePointer?
        guard nghttp2_option_new(&options) == 0, let options else { return nil }
        defer { nghttp2_option_del(options) }
        nghttp2_option_set_no_http_messaging(options, 1)
        guard nghttp2_session_client_new2(&session, callbacks, userData, options) == 0, let session else { return nil }
        // nghttp2 numbers its settings by their RFC 9113 codes.
        var settings = APNsConnectionConfiguration.initialSettings.map { setting in
            nghttp2_settings_entry(settings_id: Int32(setting.parameter.rawValue), value: UInt32(setting.value))
        }
        _ = nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
        return session
    }

    private func headerReceived(
        _ frame: UnsafePointer<nghttp2_frame>,
        name: UnsafePointer<UInt8>,
        nameLength: Int,
        value: UnsafePointer<UInt8>,
        valueLength: Int
    ) {
        guard frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return }
        let streamID = frame.pointee.hd.stream_id
        if streamID != self.answerStreamID {
            // A block cut short (nghttp2 refused a field and reset its stream) leaves nothing.
            self.answerStreamID = streamID
            self.answer = Answer()
        }
        let name = UnsafeBufferPointer(start: name, count: nameLength)
        func text() -> String { String(decoding: UnsafeBufferPointer(start: value, count: valueLength), as: UTF8.self) }
        switch nameLength {
        case 7 where name.elementsEqual(":status".utf8):
            self.answer.status = Int(text())
        case 7 where name.elementsEqual("apns-id".utf8), 15 where name.elementsEqual("apns-request-id".utf8):
            self.answer.apnsID = text()
        case 14 where name.elementsEqual("apns-unique-id".utf8):
            self.answer.uniqueID = text()
        case 15 where name.elementsEqual("apns-channel-id".utf8):
            self.answer.channelID = text()
        default:
            break
        }
    }

    private func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) {
        let header = frame.pointee.hd
        let endStream = header.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
        switch UInt32(header.type) {
        case NGHTTP2_HEADERS.rawValue:
            // Moved out, not copied (a copy retained and released its strings).
            var answer = Answer()
            if header.stream_id == self.answerStreamID { swap(&answer, &self.answer) }
            self.forgetAnswer()
            self.core.headersReceived(
                on: HTTP2StreamID(header.stream_id),
                status: answer.status,
                apnsID: answer.status == nil ? nil : answer.apnsID,
                uniqueID: answer.status == nil ? nil : answer.uniqueID,
                channelID: answer.status == nil ? nil : answer.channelID,
                endStream: endStream
            )
        case NGHTTP2_DATA.rawValue where endStream:
            // The end of a body is told by the DATA frame, not by its last chunk.
            self.core.dataReceived(on: HTTP2StreamID(header.stream_id), ByteBuffer(), endStream: true)
        case NGHTTP2_SETTINGS.rawValue where header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0:
            let settings = frame.pointee.settings
            var maximum: Int?
            for index in 0..<settings.niv
            where settings.iv[index].settings_id == Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue) {
                maximum = Int(settings.iv[index].value)
            }
            self.core.settingsReceived(maximumConcurrentStreams: maximum)
        case NGHTTP2_PING.rawValue where header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0:
            self.core.pingAcknowledged()
        case NGHTTP2_GOAWAY.rawValue:
            let goAway = frame.pointee.goaway
            var debugData: ByteBuffer?
            if let opaque = goAway.opaque_data, goAway.opaque_data_len > 0 {
                debugData = ByteBuffer(bytes: UnsafeBufferPointer(start: opaque, count: goAway.opaque_data_len))
            }
            self.core.goAwayReceived(
                lastStreamID: HTTP2StreamID(goAway.last_stream_id),
                errorCode: HTTP2ErrorCode(networkCode: Int(goAway.error_code)),
                debugData: debugData
            )
        default:
            break
        }
    }

    private func forgetAnswer() {
        self.answerStreamID = 0
        self.answer = Answer()
    }

    private func dataReceived(on streamID: Int32, _ bytes: UnsafeRawBufferPointer) {
        // Copied: the bytes are nghttp2's only during the callback. The end comes with the frame.
        self.core.dataReceived(on: HTTP2StreamID(streamID), ByteBuffer(bytes: bytes), endStream: false)
    }

    private func streamClosed(_ streamID: Int32, errorCode: UInt32) {
        self.payloads.removeValue(forID: streamID)
        if streamID == self.answerStreamID { self.forgetAnswer() }
        let reason = errorCode == NGHTTP2_NO_ERROR.rawValue ? nil : HTTP2ErrorCode(networkCode: Int(errorCode))
        self.core.streamClosed(HTTP2StreamID(streamID), reason: reason)
    }

    private static func errorText(_ code: Int32) -> String {
        String(cString: nghttp2_strerror(code))
    }
}

extension NGHTTP2ConnectionHandler: APNsConnectionTransport {
    package func writeRequest(_ request: APNsRequest, authorization: String?, on streamID: HTTP2StreamID) -> Bool {
        guard let session else { return false }
        let hasBody = request.payload.readableBytes > 0
        // nghttp2 numbers streams 1, 3, 5, … as the state machine does; anything else is a
        // failure to submit.
        guard self.submit(request, authorization: authorization, hasBody: hasBody, to: session) == Int32(streamID)
        else { return false }
        if hasBody {
            self.payloads.append(Int32(streamID), request.payload)
        }
        return true
    }

    package func resetStream(_ streamID: HTTP2StreamID) {
        guard let session else { return }
        self.payloads.removeValue(forID: Int32(streamID))
        _ = nghttp2_submit_rst_stream(
            session,
            UInt8(NGHTTP2_FLAG_NONE.rawValue),
            Int32(streamID),
            NGHTTP2_CANCEL.rawValue
        )
    }

    package func writePing(_ data: HTTP2PingData) {
        guard let session else { return }
        var opaque = data.bytes
        _ = withUnsafeBytes(of: &opaque) { bytes in
            nghttp2_submit_ping(
                session,
                UInt8(NGHTTP2_FLAG_NONE.rawValue),
                bytes.bindMemory(to: UInt8.self).baseAddress
            )
        }
    }

    package func flush() {
        self.flushOutput()
    }

    package func close() {
        if !self.inNghttp2, let session = self.session, nghttp2_session_want_write(session) != 0 {
            self.flushOutput()  // its GOAWAY, if it has one to say
        }
        self.context?.close(promise: nil)
    }
}
#endif

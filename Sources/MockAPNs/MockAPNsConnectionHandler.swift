import Foundation
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL
import NIOTLS
import Synchronization

/// Asks every connection of a mock server to announce a new `MAX_CONCURRENT_STREAMS`.
struct MockAPNsStreamLimitChange: Sendable {
    var maximumConcurrentStreams: Int
}

/// One client connection of the mock, at the HTTP/2 frame level (after `NIOHTTP2Handler` in
/// server mode): collects each request's HEADERS and DATA, validates it at END_STREAM, applies
/// the script, answers, and records it in the ledger.
final class MockAPNsConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private struct PendingRequest {
        var headers: HPACKHeaders
        var body = ByteBuffer()
    }

    private let connectionID: Int
    private let validator: MockAPNsRequestValidator
    private let broadcastAPI: MockAPNsBroadcastAPI
    private let script: MockAPNsScript
    private let ledger: MockAPNsLedger
    private let now: @Sendable () -> Date
    private let logger: Logger
    private var requests: [HTTP2StreamID: PendingRequest] = [:]
    private var openStreams: Set<HTTP2StreamID> = []
    private var requestsReceived = 0
    private var lastProcessedStreamID = HTTP2StreamID(0)
    private var goAwaySent = false
    private var hasClientCertificate = false
    /// Limits sent in SETTINGS, waiting for the client's ACK; the first is the initial one.
    private var unacknowledgedLimits: [Int]
    private var acknowledgedLimit = Int.max
    private var flushScheduled = false
    /// Bytes of DATA received since the last connection-level WINDOW_UPDATE. NIOHTTP2Handler
    /// without a stream multiplexer leaves the connection window to the handler after it: the
    /// mock gives credit back once half of the initial 65,535 bytes are used.
    private var unacknowledgedBytes = 0

    init(
        connectionID: Int,
        initialStreamLimit: Int,
        validator: MockAPNsRequestValidator,
        channels: MockAPNsChannels,
        script: MockAPNsScript,
        ledger: MockAPNsLedger,
        now: @escaping @Sendable () -> Date,
        logger: Logger
    ) {
        self.connectionID = connectionID
        self.unacknowledgedLimits = [initialStreamLimit]
        self.validator = validator
        self.broadcastAPI = MockAPNsBroadcastAPI(validator: validator, channels: channels)
        self.script = script
        self.ledger = ledger
        self.now = now
        self.logger = logger
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case let closed as StreamClosedEvent:
            self.openStreams.remove(closed.streamID)
            self.requests.removeValue(forKey: closed.streamID)
        case let change as MockAPNsStreamLimitChange:
            self.unacknowledgedLimits.append(change.maximumConcurrentStreams)
            let settings = [HTTP2Setting(parameter: .maxConcurrentStreams, value: change.maximumConcurrentStreams)]
            context.writeAndFlush(
                self.wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .settings(.settings(settings)))),
                promise: nil
            )
        case let tls as TLSUserEvent:
            if case .handshakeCompleted = tls {
                let certificate = try? context.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self)
                    .peerCertificate
                self.hasClientCertificate = certificate != nil
            }
        default:
            break
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOHTTP2Errors.MaxStreamsViolation {
            self.ledger.count { $0.streamLimitViolations += 1 }
            return
        }
        self.logger.debug("mock connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = self.unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            if self.requests[frame.streamID] == nil, !self.openStreams.contains(frame.streamID) {
                if self.openStreams.count >= self.acknowledgedLimit {
                    self.ledger.count { $0.streamLimitViolations += 1 }
                }
                self.openStreams.insert(frame.streamID)
                let open = self.openStreams.count
                self.ledger.count { $0.maximumOpenStreams = max($0.maximumOpenStreams, open) }
                self.requests[frame.streamID] = PendingRequest(headers: headers.headers)
            }
            if headers.endStream {
                self.requestComplete(frame.streamID, context: context)
            }
        case .data(let data):
            self.unacknowledgedBytes += data.data.readableBytes + (data.paddingBytes.map { $0 + 1 } ?? 0)
            if self.unacknowledgedBytes >= 65_535 / 2 {
                let update = HTTP2Frame(
                    streamID: .rootStream,
                    payload: .windowUpdate(windowSizeIncrement: self.unacknowledgedBytes)
                )
                self.unacknowledgedBytes = 0
                context.write(self.wrapOutboundOut(update), promise: nil)
                self.scheduleFlush(context: context)
            }
            guard self.requests[frame.streamID] != nil else { return }
            if case .byteBuffer(var bytes) = data.data {
                // APNs refuses payloads over 5 KB; keep a little more to tell "too large".
                if self.requests[frame.streamID]!.body.readableBytes + bytes.readableBytes <= 8192 {
                    self.requests[frame.streamID]!.body.writeBuffer(&bytes)
                }
            }
            if data.endStream {
                self.requestComplete(frame.streamID, context: context)
            }
        case .settings(.ack):
            if !self.unacknowledgedLimits.isEmpty {
                self.acknowledgedLimit = self.unacknowledgedLimits.removeFirst()
            }
        default:
            break
        }
    }

    private func requestComplete(_ streamID: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let request = self.requests.removeValue(forKey: streamID) else { return }
        if self.goAwaySent {
            self.ledger.count { $0.unprocessed += 1 }
            return
        }
        self.requestsReceived += 1
        self.ledger.count { $0.received += 1 }
        let behaviour = self.script.behaviourForNextRequest()
        if behaviour.refuse {
            self.ledger.count { $0.refused += 1 }
            context.writeAndFlush(
                self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .rstStream(.refusedStream))),
                promise: nil
            )
            return
        }
        if let every = behaviour.goAwayEvery, every > 0, self.requestsReceived % every == 0 {
            self.sendGoAway(reason: behaviour.goAwayReason, context: context)
            self.ledger.count { $0.unprocessed += 1 }
            return
        }
        if let drop = behaviour.drop, self.requestsReceived >= drop {
            self.ledger.count { $0.dropped += 1 }
            self.logger.debug("dropping the connection, as scripted")
            context.close(promise: nil)
            return
        }
        self.lastProcessedStreamID = max(self.lastProcessedStreamID, streamID)
        let record = self.answer(request, streamID: streamID)
        if behaviour.delay > .zero {
            context.eventLoop.assumeIsolated().scheduleTask(in: behaviour.delay) {
                self.respond(record, request: request, context: context)
            }
        } else {
            self.respond(record, request: request, context: context)
        }
    }

    /// Validation, then the script.
    private func answer(_ request: PendingRequest, streamID: HTTP2StreamID) -> MockAPNsRequestRecord {
        let now = self.now()
        let headers = request.headers
        var record = MockAPNsRequestRecord(
            connectionID: self.connectionID,
            streamID: Int(streamID),
            token: "",
            apnsID: headers.first(name: "apns-id"),
            collapseID: headers.first(name: "apns-collapse-id"),
            collapseIDIndexing: headers.first { $0.name == "apns-collapse-id" }?.indexable,
            topic: headers.first(name: "apns-topic"),
            pushType: headers.first(name: "apns-push-type"),
            priority: headers.first(name: "apns-priority"),
            expiration: headers.first(name: "apns-expiration"),
            payload: request.body,
            pathIndexing: headers.first { $0.name == ":path" }?.indexable,
            authorizationIndexing: headers.first { $0.name == "authorization" }?.indexable,
            status: 200
        )
        let path = headers.first(name: ":path") ?? ""
        if path.hasPrefix(MockAPNsBroadcastAPI.broadcastPrefix) || path.hasPrefix(MockAPNsBroadcastAPI.managementPrefix)
        {
            let broadcast = path.hasPrefix(MockAPNsBroadcastAPI.broadcastPrefix)
            record.api = broadcast ? .broadcast : .channelManagement
            record.apnsID = nil
            record.method = headers.first(name: ":method")
            record.path = path
            record.requestID = headers.first(name: "apns-request-id")
            record.channelID = headers.first(name: "apns-channel-id")
            var answer =
                broadcast
                ? self.broadcastAPI.broadcast(
                    headers: headers,
                    body: request.body,
                    hasClientCertificate: self.hasClientCertificate,
                    now: now
                )
                : self.broadcastAPI.manage(
                    headers: headers,
                    body: request.body,
                    hasClientCertificate: self.hasClientCertificate,
                    now: now
                )
            if answer.reason == nil,
                let scripted = self.script.scriptedAnswer(token: answer.channelID ?? "", broadcast: true)
            {
                answer = MockAPNsAnswer(status: scripted.status, reason: scripted.reason, channelID: answer.channelID)
            }
            record.status = answer.status
            record.reason = answer.reason
            record.responseHeaders = answer.headers.map { (name: $0.0, value: $0.1) }
            record.responseBody = answer.body
            record.keyID = answer.claims?.keyID
            record.tokenIssuedAt = answer.claims?.issuedAt
            return record
        }
        switch self.validator.validate(
            headers: headers,
            body: request.body,
            hasClientCertificate: self.hasClientCertificate,
            now: now
        ) {
        case .failure(let refused):
            record.token = refused.token ?? ""
            record.status = refused.status
            record.reason = refused.reason
        case .success(let accepted):
            record.token = accepted.token
            record.keyID = accepted.claims?.keyID
            record.tokenIssuedAt = accepted.claims?.issuedAt
            if let scripted = self.script.scriptedAnswer(token: accepted.token) {
                record.status = scripted.status
                record.reason = scripted.reason
                record.timestamp = scripted.timestamp
            }
        }
        return record
    }

    private func respond(_ record: MockAPNsRequestRecord, request: PendingRequest, context: ChannelHandlerContext) {
        guard context.channel.isActive else { return }
        guard self.openStreams.contains(HTTP2StreamID(record.streamID)) else {
            // The client reset the stream while a delayed answer waited: APNs processed the
            // request all the same (the device gets it), so it is recorded; nothing is written
            // on the closed stream.
            self.ledger.record(record)
            return
        }
        var headers = HPACKHeaders()
        headers.add(name: ":status", value: String(record.status))
        if record.api == .device {
            headers.add(
                name: "apns-id",
                value: record.apnsID ?? UUID().uuidString.lowercased(),
                indexing: .nonIndexable
            )
        } else {
            headers.add(
                name: "apns-request-id",
                value: record.requestID ?? UUID().uuidString.lowercased(),
                indexing: .nonIndexable
            )
        }
        for (name, value) in record.responseHeaders {
            headers.add(name: name, value: value, indexing: .nonIndexable)
        }
        let streamID = HTTP2StreamID(record.streamID)
        if record.wasAccepted, let body = record.responseBody {
            headers.add(name: "content-type", value: "application/json")
            context.write(
                self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers)))),
                promise: nil
            )
            let data = ByteBuffer(string: body)
            context.write(
                self.wrapOutboundOut(
                    HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(data), endStream: true)))
                ),
                promise: nil
            )
        } else if record.wasAccepted {
            context.write(
                self.wrapOutboundOut(
                    HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers, endStream: true)))
                ),
                promise: nil
            )
        } else {
            let body = ByteBuffer(string: Self.errorBody(reason: record.reason, timestamp: record.timestamp))
            headers.add(name: "content-type", value: "application/json")
            context.write(
                self.wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers)))),
                promise: nil
            )
            context.write(
                self.wrapOutboundOut(
                    HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(body), endStream: true)))
                ),
                promise: nil
            )
        }
        self.scheduleFlush(context: context)
        self.ledger.record(record)
    }

    private func scheduleFlush(context: ChannelHandlerContext) {
        guard !self.flushScheduled else { return }
        self.flushScheduled = true
        context.eventLoop.assumeIsolated().execute {
            self.flushScheduled = false
            context.flush()
        }
    }

    private func sendGoAway(reason: MockAPNsReason, context: ChannelHandlerContext) {
        self.goAwaySent = true
        self.ledger.count { $0.goAways += 1 }
        let debugData = ByteBuffer(string: Self.errorBody(reason: reason, timestamp: nil))
        self.logger.debug("sending GOAWAY, as scripted", metadata: ["last_stream_id": "\(self.lastProcessedStreamID)"])
        context.writeAndFlush(
            self.wrapOutboundOut(
                HTTP2Frame(
                    streamID: .rootStream,
                    payload: .goAway(
                        lastStreamID: self.lastProcessedStreamID,
                        errorCode: .noError,
                        opaqueData: debugData
                    )
                )
            ),
            promise: nil
        )
        // The client closes once its processed streams are answered; close anyway if it does not.
        // Not soon: a client stalled for seconds (a busy machine) must still read every answer
        // before the close, or it sends again what was delivered.
        context.eventLoop.assumeIsolated().scheduleTask(in: .seconds(60)) {
            context.close(promise: nil)
        }
    }

    /// The JSON body of an error response, as APNs writes it: `{"reason":"…"}`, with
    /// `"timestamp"` (milliseconds) for 410.
    static func errorBody(reason: MockAPNsReason?, timestamp: UInt64?) -> String {
        var object: [String: Any] = [:]
        if let reason { object["reason"] = reason.rawValue }
        if let timestamp { object["timestamp"] = timestamp }
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else {
            return "{}"
        }
        return String(decoding: data, as: UTF8.self)
    }
}

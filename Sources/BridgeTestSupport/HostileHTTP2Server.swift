import DevelopmentPKI
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization
import UpstreamAPNs

/// An HTTP/2 server on 127.0.0.1 that answers every request in one way APNs never does, for the
/// tests that hold both upstream engines to the same reading of a broken or hostile upstream.
/// Unlike ``MockAPNs/MockAPNsServer`` it checks nothing and runs NIOHTTP2 without its header
/// and content-length validation, so that it can send what a validating server would refuse to.
package final class HostileHTTP2Server: Sendable {
    package enum Behaviour: String, Sendable, CustomStringConvertible {
        /// `400` with `{"reason":"BadDeviceToken"}` and a `content-length` of 3: the header
        /// disagrees with the body.
        case misstatedContentLength
        /// `RST_STREAM(PROTOCOL_ERROR)` on every request.
        case resetWithProtocolError
        /// Each connection answers its first request with 200; at its second it sends GOAWAY
        /// naming that stream as processed and never answers it: every connection drains soon
        /// after it opened and holds a stream open until the client resets it (the pool storm
        /// of docs/upstream.md#connections).
        case goAwayAfterFirstAnswer

        /// The behaviours that are one reading of an answer, which both engines must share.
        package static let malformedAnswers: [Behaviour] = [.misstatedContentLength, .resetWithProtocolError]

        package var description: String { self.rawValue }
    }

    package let pki: DevelopmentCA
    private let channel: any Channel
    private let connections: ConnectionCount

    package var port: Int { self.channel.localAddress!.port! }

    private init(pki: DevelopmentCA, channel: any Channel, connections: ConnectionCount) {
        self.pki = pki
        self.channel = channel
        self.connections = connections
    }

    /// Connections accepted so far.
    package var connectionsAccepted: Int { self.connections.state.withLock { $0.accepted } }

    /// The most connections open at once so far.
    package var mostConnectionsOpen: Int { self.connections.state.withLock { $0.most } }

    /// Returns once no client connection is open (each one's close has been seen).
    package func connectionsClosed() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = self.connections.state.withLock { state -> Bool in
                guard state.open > 0 else { return true }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// The connections accepted, open and at most open at once, and who waits for none open.
    private final class ConnectionCount: Sendable {
        struct State {
            var accepted = 0
            var open = 0
            var most = 0
            var waiters: [CheckedContinuation<Void, Never>] = []
        }

        let state = Mutex(State())

        func opened() {
            self.state.withLock { state in
                state.accepted += 1
                state.open += 1
                state.most = max(state.most, state.open)
            }
        }

        func closed() {
            let waiters = self.state.withLock { state in
                state.open -= 1
                guard state.open == 0 else { return [CheckedContinuation<Void, Never>]() }
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume() }
        }
    }

    package static func start(_ behaviour: Behaviour) async throws -> HostileHTTP2Server {
        let pki = try DevelopmentCA()
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(pki.server.certificate)],
            privateKey: .privateKey(pki.server.privateKey)
        )
        tls.applicationProtocols = ["h2"]
        tls.shutdownTimeout = .milliseconds(100)
        let context = try NIOSSLContext(configuration: tls)
        let connections = ConnectionCount()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                connections.opened()
                channel.closeFuture.whenComplete { _ in connections.closed() }
                return channel.eventLoop.makeCompletedFuture {
                    var http2 = NIOHTTP2Handler.ConnectionConfiguration()
                    http2.headerBlockValidation = .disabled
                    http2.contentLengthValidation = .disabled
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLServerHandler(context: context))
                    try sync.addHandler(NIOHTTP2Handler(mode: .server, connectionConfiguration: http2))
                    try sync.addHandler(AnswerHandler(behaviour: behaviour))
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        return HostileHTTP2Server(pki: pki, channel: channel, connections: connections)
    }

    /// Where a client reaches it, trusting its throwaway CA.
    package var endpoint: APNsEndpoint {
        APNsEndpoint(
            host: "127.0.0.1",
            port: self.port,
            serverHostname: "localhost",
            trustRoots: .certificates([self.pki.caCertificate])
        )
    }

    package func close() async {
        try? await self.channel.close()
    }

    /// Answers each request when its last frame arrives.
    private final class AnswerHandler: ChannelInboundHandler {
        typealias InboundIn = HTTP2Frame
        typealias OutboundOut = HTTP2Frame

        let behaviour: Behaviour
        /// Requests ended on this connection so far.
        private var requests = 0

        init(behaviour: Behaviour) {
            self.behaviour = behaviour
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let frame = self.unwrapInboundIn(data)
            let ended: Bool
            switch frame.payload {
            case .headers(let headers): ended = headers.endStream
            case .data(let data): ended = data.endStream
            default: ended = false
            }
            guard ended else { return }
            switch self.behaviour {
            case .misstatedContentLength:
                let headers: HPACKHeaders = [
                    ":status": "400", "content-type": "application/json", "content-length": "3",
                ]
                context.write(
                    self.wrapOutboundOut(
                        HTTP2Frame(streamID: frame.streamID, payload: .headers(.init(headers: headers)))
                    ),
                    promise: nil
                )
                let body = ByteBuffer(string: #"{"reason":"BadDeviceToken"}"#)
                context.write(
                    self.wrapOutboundOut(
                        HTTP2Frame(
                            streamID: frame.streamID,
                            payload: .data(.init(data: .byteBuffer(body), endStream: true))
                        )
                    ),
                    promise: nil
                )
            case .resetWithProtocolError:
                context.write(
                    self.wrapOutboundOut(HTTP2Frame(streamID: frame.streamID, payload: .rstStream(.protocolError))),
                    promise: nil
                )
            case .goAwayAfterFirstAnswer:
                self.requests += 1
                switch self.requests {
                case 1:
                    let headers: HPACKHeaders = [":status": "200", "apns-id": "00000000-0000-0000-0000-000000000000"]
                    context.write(
                        self.wrapOutboundOut(
                            HTTP2Frame(
                                streamID: frame.streamID,
                                payload: .headers(.init(headers: headers, endStream: true))
                            )
                        ),
                        promise: nil
                    )
                case 2:
                    // This stream is held; those after it were not processed.
                    let goAway = HTTP2Frame.FramePayload.goAway(
                        lastStreamID: frame.streamID,
                        errorCode: .noError,
                        opaqueData: nil
                    )
                    context.write(
                        self.wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: goAway)),
                        promise: nil
                    )
                default:
                    return
                }
            }
            context.flush()
        }
    }
}

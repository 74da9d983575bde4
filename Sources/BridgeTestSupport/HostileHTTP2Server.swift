import DevelopmentPKI
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import UpstreamAPNs

/// An HTTP/2 server on 127.0.0.1 that answers every request in one way APNs never does, for the
/// tests that hold both upstream engines to the same reading of a broken or hostile upstream.
/// Unlike ``MockAPNs/MockAPNsServer`` it checks nothing and runs NIOHTTP2 without its header
/// and content-length validation, so that it can send what a validating server would refuse to.
public final class HostileHTTP2Server: Sendable {
    public enum Behaviour: String, Sendable, CaseIterable, CustomStringConvertible {
        /// `400` with `{"reason":"BadDeviceToken"}` and a `content-length` of 3: the header
        /// disagrees with the body.
        case misstatedContentLength
        /// `RST_STREAM(PROTOCOL_ERROR)` on every request.
        case resetWithProtocolError

        public var description: String { self.rawValue }
    }

    public let pki: DevelopmentCA
    private let channel: any Channel

    public var port: Int { self.channel.localAddress!.port! }

    private init(pki: DevelopmentCA, channel: any Channel) {
        self.pki = pki
        self.channel = channel
    }

    public static func start(_ behaviour: Behaviour) async throws -> HostileHTTP2Server {
        let pki = try DevelopmentCA()
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(pki.server.certificate)],
            privateKey: .privateKey(pki.server.privateKey)
        )
        tls.applicationProtocols = ["h2"]
        tls.shutdownTimeout = .milliseconds(100)
        let context = try NIOSSLContext(configuration: tls)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
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
        return HostileHTTP2Server(pki: pki, channel: channel)
    }

    /// Where a client reaches it, trusting its throwaway CA.
    public var endpoint: APNsEndpoint {
        APNsEndpoint(
            host: "127.0.0.1",
            port: self.port,
            serverHostname: "localhost",
            trustRoots: .certificates([self.pki.caCertificate])
        )
    }

    public func close() async {
        try? await self.channel.close()
    }

    /// Answers each request when its last frame arrives.
    private final class AnswerHandler: ChannelInboundHandler {
        typealias InboundIn = HTTP2Frame
        typealias OutboundOut = HTTP2Frame

        let behaviour: Behaviour

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
            }
            context.flush()
        }
    }
}

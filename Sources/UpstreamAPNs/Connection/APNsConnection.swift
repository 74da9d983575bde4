import Logging
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL

/// One long-lived HTTP/2 connection to APNs: TLS (ALPN h2) → `NIOHTTP2Handler` →
/// ``APNsConnectionHandler``, or TLS → ``NGHTTP2ConnectionHandler`` (the libnghttp2 engine).
/// Sendable; requests are handed to the handler on its event loop.
final class APNsConnection: Sendable {
    let id: Int
    let channel: any Channel
    private let handler: NIOLoopBound<any APNsConnectionDriver>

    private init(id: Int, channel: any Channel, handler: NIOLoopBound<any APNsConnectionDriver>) {
        self.id = id
        self.channel = channel
        self.handler = handler
    }

    var eventLoop: any EventLoop { self.channel.eventLoop }

    /// Opens a connection; the future completes when the server's first SETTINGS arrived.
    static func connect(
        id: Int,
        endpoint: APNsEndpoint,
        sslContext: NIOSSLContext,
        configuration: APNsConnectionConfiguration,
        connectTimeout: TimeAmount,
        eventLoop: any EventLoop,
        logger: Logger
    ) -> EventLoopFuture<APNsConnection> {
        let readyPromise = eventLoop.makePromise(of: Void.self)
        var connectionLogger = logger
        connectionLogger[metadataKey: "upstream_connection"] = "\(id)"
        let finalLogger = connectionLogger
        let sniHostname = endpoint.serverHostname.isIPAddress ? nil : endpoint.serverHostname
        let timeout = eventLoop.scheduleTask(in: connectTimeout) {
            readyPromise.fail(APNsStreamFailure.unprocessed("HTTP/2 set-up timed out"))
        }
        readyPromise.futureResult.whenComplete { _ in timeout.cancel() }

        return ClientBootstrap(group: eventLoop)
            .connectTimeout(connectTimeout)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: sniHostname))
                    try APNsEnginePipeline.addEngine(
                        to: sync,
                        connectionID: id,
                        configuration: configuration,
                        readyPromise: readyPromise,
                        logger: finalLogger
                    )
                }
            }
            .connect(host: endpoint.host, port: endpoint.port)
            .flatMapError { error in
                readyPromise.fail(error)
                return eventLoop.makeFailedFuture(error)
            }
            .flatMap { channel in
                readyPromise.futureResult.flatMapErrorThrowing { error in
                    channel.close(promise: nil)
                    throw error
                }.flatMapThrowing {
                    let handler = try APNsEnginePipeline.engineHandler(
                        in: channel.pipeline.syncOperations,
                        engine: configuration.engine
                    )
                    return APNsConnection(
                        id: id,
                        channel: channel,
                        handler: NIOLoopBound(handler, eventLoop: channel.eventLoop)
                    )
                }
            }
    }

    /// Connects the handler to its pool. Call once, right after `connect`.
    func setEvents(limitChanged: @escaping @Sendable (Int) -> Void, closed: @escaping @Sendable () -> Void) {
        self.eventLoop.execute {
            self.handler.value.setEvents(.init(limitChanged: limitChanged, closed: closed))
            if !self.channel.isActive {
                closed()
            }
        }
    }

    /// Sends a request; its owner is called once, on the connection's event loop. Its answer
    /// deadline counts from now, on the connection's loop, as the request is written.
    func send(
        _ request: APNsRequest,
        authorization: String?,
        deadlines: AttemptDeadlines,
        owner: any APNsStreamOwner
    ) {
        if self.eventLoop.inEventLoop {
            self.handler.value.send(
                request,
                authorization: authorization,
                deadline: deadlines.answerDeadline(writtenAt: .now()),
                owner: owner
            )
        } else {
            self.eventLoop.execute {
                self.handler.value.send(
                    request,
                    authorization: authorization,
                    deadline: deadlines.answerDeadline(writtenAt: .now()),
                    owner: owner
                )
            }
        }
    }

    func close() {
        self.channel.close(promise: nil)
    }
}

extension String {
    var isIPAddress: Bool {
        (try? SocketAddress(ipAddress: self, port: 0)) != nil
    }
}

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

/// Whoever hears how one request's stream ended: called once, on the connection's event loop.
///
/// An object, not a closure: the client's one object per request (``APNsRequestInFlight``)
/// goes down to the stream and is called back itself, where a closure made at each layer
/// (client, pool, connection) cost an allocation and a retain of each capture per request.
package protocol APNsStreamOwner: AnyObject, Sendable {
    /// The stream ended on connection `connectionID` (the pool's number for it).
    func streamEnded(_ result: Result<APNsResponse, APNsStreamFailure>, onConnection connectionID: Int)
}

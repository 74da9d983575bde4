import NIOCore
import NIOPosix
import NIOSSL

/// A legacy provider's connection to a gateway (the binary interface's port 2195): TLS with a
/// client certificate; it writes raw bytes (frames from ``FrameBuilder``) and collects
/// everything the server sends until the connection closes. `apns-bridge send` is one; the
/// tests and the load generator use it as their providers.
package final class LegacyConnection: Sendable {
    package let channel: any Channel
    private let closed: EventLoopFuture<ByteBuffer>

    private init(channel: any Channel, closed: EventLoopFuture<ByteBuffer>) {
        self.channel = channel
        self.closed = closed
    }

    /// Connects with a TLS configuration of the caller's (the `send` command's files).
    package static func connect(
        to address: SocketAddress,
        tls: TLSConfiguration,
        serverHostname: String?,
        from localAddress: SocketAddress? = nil,
        preamble: ByteBuffer? = nil,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> LegacyConnection {
        let sslContext = try NIOSSLContext(configuration: tls)
        let eventLoop = group.next()
        let closed = eventLoop.makePromise(of: ByteBuffer.self)
        var bootstrap = ClientBootstrap(group: eventLoop)
        if let localAddress {
            bootstrap = bootstrap.bind(to: localAddress)
        }
        let channel =
            try await bootstrap
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelOption(.allowRemoteHalfClosure, value: true)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let handler = CollectingHandler(promise: closed)
                    if let preamble {
                        try channel.pipeline.syncOperations.addHandler(PreambleWriter(preamble))
                    }
                    try channel.pipeline.syncOperations.addHandler(
                        try NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname)
                    )
                    try channel.pipeline.syncOperations.addHandler(handler)
                }
            }
            .connect(to: address)
            .get()
        return LegacyConnection(channel: channel, closed: closed.futureResult)
    }

    /// Writes and flushes bytes; completes when they were handed to the socket.
    package func send(_ bytes: ByteBuffer) async throws {
        try await self.channel.writeAndFlush(bytes)
    }

    /// Waits until the server closes the connection and returns every byte it sent; fails if
    /// the connection is still open after `timeout`. It returns at the close, so the default
    /// only bounds a hang: a busy machine (CI's 2 cores running a debug build of the whole test
    /// suite) has taken longer than 10 s to close a connection it had answered.
    package func bytesUntilClose(timeout: TimeAmount = .seconds(60)) async throws -> ByteBuffer {
        let eventLoop = self.channel.eventLoop
        let timer = eventLoop.scheduleTask(in: timeout) {}
        let timedOut = timer.futureResult.map { Optional<ByteBuffer>.none }
        let result = try await self.closed.map { Optional($0) }.or(timedOut).get()
        timer.cancel()
        guard let result else { throw TimedOut(what: "the server to close the connection") }
        return result
    }

    /// Ends this side's output and keeps reading, as a provider that is done writing does:
    /// with TLS close_notify first, or (`closeNotify: false`) with a bare FIN, as most legacy
    /// clients close a socket.
    package func closeOutput(closeNotify: Bool = true) async throws {
        if closeNotify {
            try await self.channel.close(mode: .output)
        } else {
            // Below NIOSSL: the FIN goes out without a close_notify.
            let channel = self.channel
            try await channel.eventLoop.flatSubmit {
                do {
                    let tls = try channel.pipeline.syncOperations.context(handlerType: NIOSSLClientHandler.self)
                    let closed = channel.eventLoop.makePromise(of: Void.self)
                    tls.close(mode: .output, promise: closed)
                    return closed.futureResult
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }.get()
        }
    }

    /// Closes as a provider that is done: close_notify first, then waits (at most `timeout`)
    /// for the server to close its side, then closes. Returns what the server sent meanwhile,
    /// or `nil` when it had not closed within `timeout`.
    ///
    /// Prompt where ``close()`` is not: with half-closure allowed, NIOSSL, once it started a
    /// full close, does not finish it when the peer's close_notify arrives, but only when its
    /// shutdown timeout (5 s) fires; after a close_notify of our own (output closed), the
    /// peer's finishes the close at once.
    package func finish(timeout: TimeAmount = .seconds(5)) async -> ByteBuffer? {
        do {
            try await self.closeOutput()
        } catch {
            await self.close()
            return nil
        }
        let bytes = try? await self.bytesUntilClose(timeout: timeout)
        await self.close()
        return bytes
    }

    /// Whether the connection is still open.
    package var isActive: Bool { self.channel.isActive }

    package func close() async {
        try? await self.channel.close()
    }
}

extension EventLoopFuture where Value: Sendable {
    /// The first of two futures to succeed.
    fileprivate func or(_ other: EventLoopFuture<Value>) -> EventLoopFuture<Value> {
        let promise = self.eventLoop.makePromise(of: Value.self)
        self.cascade(to: promise)
        other.cascade(to: promise)
        return promise.futureResult
    }
}

private final class CollectingHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    let promise: EventLoopPromise<ByteBuffer>
    private var received = ByteBuffer()

    init(promise: EventLoopPromise<ByteBuffer>) {
        self.promise = promise
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        self.received.writeBuffer(&bytes)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.promise.succeed(self.received)
        context.fireChannelInactive()
    }

    /// A connect that fails never makes the channel active, nor inactive: complete the promise
    /// here so it does not leak (the caller already has the connect's error).
    func handlerRemoved(context: ChannelHandlerContext) {
        self.promise.fail(ChannelError.ioOnClosedChannel)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let channelEvent = event as? ChannelEvent, channelEvent == .inputClosed {
            // The server closed its side: all it will send has arrived.
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Resets and unclean TLS shutdowns: the bytes received so far still count.
        context.close(promise: nil)
    }
}

/// Writes bytes in the clear as the connection becomes active, before TLS's first byte (a
/// load balancer's PROXY protocol header, as the tests play one), then leaves.
private final class PreambleWriter: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let bytes: ByteBuffer

    init(_ bytes: ByteBuffer) {
        self.bytes = bytes
    }

    func channelActive(context: ChannelHandlerContext) {
        context.writeAndFlush(self.wrapOutboundOut(self.bytes), promise: nil)
        context.fireChannelActive()
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}

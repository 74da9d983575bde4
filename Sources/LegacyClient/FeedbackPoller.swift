import LegacyProtocol
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// A feedback-service poller (port 2196), like a cron job's: connects with a client
/// certificate, reads tuples until the server closes, and tells whether the close was clean
/// (TLS close_notify) or not (a reset, or the server process killed). `apns-bridge feedback`
/// is one; the tests use it as their cron job.
package enum FeedbackPoller {
    package struct Poll: Sendable {
        /// Every tuple, in order (empty when `keepTuples` was false).
        package var tuples: [FeedbackTuple]
        package var tupleCount: Int
        /// The server ended the stream with close_notify, and no partial tuple was left over.
        package var cleanClose: Bool
    }

    /// Polls with a TLS configuration of the caller's (the `feedback` command's files).
    package static func poll(
        _ address: SocketAddress,
        tls: TLSConfiguration,
        serverHostname: String?,
        keepTuples: Bool = true,
        closeAfterBytes: Int? = nil,
        timeout: TimeAmount = .seconds(60),
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> Poll {
        let sslContext = try NIOSSLContext(configuration: tls)
        let eventLoop = group.next()
        let done = eventLoop.makePromise(of: Poll.self)
        let channel = try await ClientBootstrap(group: eventLoop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        try NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname)
                    )
                    try channel.pipeline.syncOperations.addHandler(
                        TupleCollector(promise: done, keepTuples: keepTuples, closeAfterBytes: closeAfterBytes)
                    )
                }
            }
            .connect(to: address)
            .get()
        let timer = eventLoop.scheduleTask(in: timeout) { channel.close(promise: nil) }
        defer { timer.cancel() }
        return try await done.futureResult.get()
    }
}

private final class TupleCollector: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let promise: EventLoopPromise<FeedbackPoller.Poll>
    private let keepTuples: Bool
    private let closeAfterBytes: Int?
    private var decoder = FeedbackTupleDecoder()
    private var buffered = ByteBuffer()
    private var bytesRead = 0
    private var poll = FeedbackPoller.Poll(tuples: [], tupleCount: 0, cleanClose: true)
    private var failed = false

    init(promise: EventLoopPromise<FeedbackPoller.Poll>, keepTuples: Bool, closeAfterBytes: Int?) {
        self.promise = promise
        self.keepTuples = keepTuples
        self.closeAfterBytes = closeAfterBytes
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        if let limit = self.closeAfterBytes, self.bytesRead + bytes.readableBytes >= limit {
            bytes = bytes.readSlice(length: limit - self.bytesRead)!
            self.failed = true
            self.absorb(&bytes)
            context.close(promise: nil)
            return
        }
        self.absorb(&bytes)
    }

    private func absorb(_ bytes: inout ByteBuffer) {
        self.bytesRead += bytes.readableBytes
        self.buffered.writeBuffer(&bytes)
        do {
            while let tuple = try self.decoder.decode(buffer: &self.buffered) {
                self.poll.tupleCount += 1
                if self.keepTuples {
                    self.poll.tuples.append(
                        FeedbackTuple(timestamp: tuple.timestamp, deviceToken: ByteBuffer(buffer: tuple.deviceToken))
                    )
                }
            }
            self.buffered.discardReadBytes()
        } catch {
            self.failed = true
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.failed = true  // NIOSSLError.uncleanShutdown: FIN or reset without close_notify
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.poll.cleanClose = !self.failed && self.buffered.readableBytes == 0
        self.promise.succeed(self.poll)
        context.fireChannelInactive()
    }

    /// A connect that fails never makes the channel active, nor inactive: the poll fails here
    /// (the caller gets the connect's error first; this keeps the promise from leaking). After
    /// `channelInactive` the promise is complete already, and this changes nothing.
    func handlerRemoved(context: ChannelHandlerContext) {
        self.promise.fail(ChannelError.ioOnClosedChannel)
    }
}

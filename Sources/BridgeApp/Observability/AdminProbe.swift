import NIOCore
import NIOPosix

/// A GET on the admin port of a running bridge, for `apns-bridge healthcheck` (the container's
/// HEALTHCHECK): the HTTP status of one request, or an error if nothing answers in time.
public enum AdminProbe {
    public struct NoAnswer: Error, CustomStringConvertible {
        public var description: String
    }

    /// - Returns: the status code of `GET path` on `host:port`.
    public static func status(
        host: String,
        port: Int,
        path: String = "/readyz",
        timeout: TimeAmount = .seconds(5),
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> Int {
        // A listener on every address is reached on loopback.
        let target = host == "0.0.0.0" ? "127.0.0.1" : (host == "::" ? "::1" : host)
        let eventLoop = group.next()
        let received = eventLoop.makePromise(of: ByteBuffer.self)
        let timer = eventLoop.scheduleTask(in: timeout) {
            received.fail(NoAnswer(description: "no answer from \(target):\(port) within \(timeout)"))
        }
        defer { timer.cancel() }
        let channel: any Channel
        do {
            channel = try await ClientBootstrap(group: eventLoop)
                .connectTimeout(timeout)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(ResponseCollector(promise: received))
                    }
                }
                .connect(host: target, port: port)
                .get()
        } catch {
            received.fail(error)
            throw NoAnswer(description: "cannot connect to \(target):\(port): \(error)")
        }
        defer { channel.close(promise: nil) }
        try await channel.writeAndFlush(ByteBuffer(string: "GET \(path) HTTP/1.1\r\nHost: \(target)\r\nConnection: close\r\n\r\n"))
        var response = try await received.futureResult.get()
        // "HTTP/1.1 200 OK"
        guard let line = response.readString(length: min(response.readableBytes, 64))?.split(separator: "\r\n").first,
            line.hasPrefix("HTTP/"), let status = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
        else {
            throw NoAnswer(description: "\(target):\(port) did not answer HTTP")
        }
        return status
    }
}

/// Collects what the server sends until it closes.
private final class ResponseCollector: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let promise: EventLoopPromise<ByteBuffer>
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

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

import Foundation
import NIOCore
import NIOPosix

/// One request to the admin port of a running bridge, for `apns-bridge healthcheck` (the
/// container's HEALTHCHECK) and `apns-bridge reload`: the HTTP status and body of the answer,
/// or an error if nothing answers in time.
package enum AdminProbe {
    package struct NoAnswer: Error, CustomStringConvertible {
        package var description: String
    }

    /// - Returns: the status code of `GET path` on `host:port`.
    package static func status(
        host: String,
        port: Int,
        path: String = "/readyz",
        timeout: TimeAmount = .seconds(5),
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> Int {
        try await Self.request(host: host, port: port, path: path, timeout: timeout, group: group).status
    }

    /// - Returns: the status code and body of `method path` on `host:port`.
    package static func request(
        host: String,
        port: Int,
        method: String = "GET",
        path: String,
        timeout: TimeAmount = .seconds(5),
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> (status: Int, body: String) {
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
        try await channel.writeAndFlush(
            ByteBuffer(
                string:
                    "\(method) \(path) HTTP/1.1\r\nHost: \(target)\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
        )
        var response = try await received.futureResult.get()
        let text = response.readString(length: response.readableBytes) ?? ""
        // "HTTP/1.1 200 OK"
        guard let line = text.split(separator: "\r\n").first, line.hasPrefix("HTTP/"),
            let status = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
        else {
            throw NoAnswer(description: "\(target):\(port) did not answer HTTP")
        }
        let body = text.range(of: "\r\n\r\n").map { String(text[$0.upperBound...]) } ?? ""
        return (status, body)
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

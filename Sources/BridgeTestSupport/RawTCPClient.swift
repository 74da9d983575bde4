import NIOCore
import NIOPosix

/// A plain TCP connection that sends nothing: a client stuck before its TLS handshake.
package enum RawTCPClient {
    /// Connects, sends nothing, and reports whether the server closed the connection within
    /// `timeout`.
    package static func connectAndWaitForClose(
        to address: SocketAddress,
        timeout: TimeAmount,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> Bool {
        let channel = try await ClientBootstrap(group: group).connect(to: address).get()
        let eventLoop = channel.eventLoop
        let result = eventLoop.makePromise(of: Bool.self)
        channel.closeFuture.whenComplete { _ in result.succeed(true) }
        let timer = eventLoop.scheduleTask(in: timeout) { result.succeed(false) }
        let closed = try await result.futureResult.get()
        timer.cancel()
        try? await channel.close()
        return closed
    }
}

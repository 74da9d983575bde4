import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// The listening socket of a legacy port (the gateway's, the feedback service's): each accepted
/// connection is admitted against the limit, then gets NIOSSL and the port's own handler.
enum LegacyListener {
    static func bind(
        host: String,
        port: Int,
        tls: LegacyTLSContext,
        registry: ConnectionRegistry,
        maximumConnections: Int,
        group: any EventLoopGroup,
        logger: Logger,
        makeHandler: @escaping @Sendable (_ connectionLogger: Logger) -> any ChannelHandler
    ) async throws -> any Channel {
        try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                guard registry.admit(channel, limit: maximumConnections) else {
                    logger.warning("connection limit reached; refusing a connection", metadata: ["limit": "\(maximumConnections)"])
                    return channel.close()
                }
                return channel.eventLoop.makeCompletedFuture {
                    var connectionLogger = logger
                    connectionLogger[metadataKey: "peer"] = "\(channel.remoteAddress.map { "\($0)" } ?? "?")"
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(tls.makeServerHandler(logger: connectionLogger))
                    try sync.addHandler(makeHandler(connectionLogger))
                }
            }
            .bind(host: host, port: port)
            .get()
    }
}

import BridgeCore
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// The listening socket of a legacy port (the gateway's, the feedback service's): each accepted
/// connection is admitted against the limits, then gets NIOSSL, the shared
/// ``ProviderHandshakeHandler`` (handshake timeout, the verified tenant) and the port's own
/// handler, which starts at ``ProviderVerified``.
enum LegacyListener {
    /// - Parameters:
    ///   - listener: which port (its name in metrics and logs: `gateway`, `feedback`).
    ///   - tasks: where the connections' async work runs (the client-certificate check).
    ///   - allowHalfClosure: whether the port's handler deals with the end of a client's input
    ///     itself (`ChannelEvent.inputClosed`), keeping its output open until it is done.
    static func bind(
        listener: ProviderHandshakeHandler.Port,
        host: String,
        port: Int,
        tls: LegacyTLSContext,
        tasks: ConnectionTasks,
        registry: ConnectionRegistry,
        admission: ConnectionAdmission,
        handshakeTimeout: TimeAmount,
        usage: UsageRecorder?,
        allowHalfClosure: Bool = false,
        group: any EventLoopGroup,
        logger: Logger,
        makeHandler: @escaping @Sendable (_ connectionLogger: Logger) -> any ChannelHandler
    ) async throws -> any Channel {
        let name = listener == .gateway ? "gateway" : "feedback"
        let refusals = RefusalLog(listener: name, logger: logger)
        return try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(.allowRemoteHalfClosure, value: allowHalfClosure)
            .childChannelInitializer { channel in
                if let refusal = registry.admit(channel, limits: admission) {
                    refusals.refused(refusal, peer: channel.remoteAddress, admission: admission)
                    return channel.close()
                }
                return channel.eventLoop.makeCompletedFuture {
                    var connectionLogger = logger
                    connectionLogger[metadataKey: "peer"] = "\(channel.remoteAddress.map { "\($0)" } ?? "?")"
                    let sync = channel.pipeline.syncOperations
                    let peer = VerifiedPeer()
                    try sync.addHandler(tls.makeServerHandler(peer: peer, tasks: tasks, logger: connectionLogger))
                    try sync.addHandler(
                        ProviderHandshakeHandler(
                            peer: peer,
                            registry: registry,
                            timeout: handshakeTimeout,
                            port: listener,
                            usage: usage,
                            logger: connectionLogger
                        )
                    )
                    try sync.addHandler(makeHandler(connectionLogger))
                }
            }
            .bind(host: host, port: port)
            .get()
    }
}

/// Refused connections are counted each, and logged at most once per interval with how many
/// were refused since the last line: a flood must not become a flood of log lines.
final class RefusalLog: Sendable {
    private struct State {
        var lastLine: NIODeadline?
        var suppressed = 0
    }

    private let listener: String
    private let logger: Logger
    private let interval: TimeAmount
    private let state = Mutex(State())

    init(listener: String, logger: Logger, interval: TimeAmount = .seconds(10)) {
        self.listener = listener
        self.logger = logger
        self.interval = interval
    }

    func refused(_ refusal: ConnectionRegistry.Refusal, peer: SocketAddress?, admission: ConnectionAdmission) {
        guard refusal != .shuttingDown else { return }
        GatewayMetrics.shared.connectionRefused(listener: self.listener, reason: refusal.rawValue)
        let now = NIODeadline.now()
        let suppressed: Int? = self.state.withLock { state in
            if let last = state.lastLine, now - last < self.interval {
                state.suppressed += 1
                return nil
            }
            defer { state.suppressed = 0 }
            state.lastLine = now
            return state.suppressed
        }
        guard let suppressed else { return }
        let limit: Int
        switch refusal {
        case .connections: limit = admission.maximumConnections
        case .handshakes: limit = admission.maximumHandshakes
        case .handshakesPerAddress: limit = admission.maximumHandshakesPerAddress
        case .shuttingDown: return
        }
        self.logger.warning(
            "refusing connections: limit reached",
            metadata: [
                "listener": "\(self.listener)",
                "limit": "\(refusal.rawValue)=\(limit)",
                "peer": "\(peer.map { "\($0)" } ?? "?")",
                "refused_since_last_line": "\(suppressed)",
            ]
        )
    }
}

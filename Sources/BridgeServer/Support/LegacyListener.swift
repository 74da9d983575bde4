import BridgeCore
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import ProxyProtocol
import Synchronization

/// The listening socket of a legacy port (the gateway's, the feedback service's): each accepted
/// connection is admitted against the limits, then gets NIOSSL, the shared
/// ``ProviderHandshakeHandler`` (handshake timeout, the verified tenant) and the port's own
/// handler, which starts at ``ProviderVerified``.
///
/// The listener owns its connections the way swift-nio's async servers do (`NIOAsyncChannel`,
/// `executeThenClose`, a discarding task group): ``run()`` accepts, and each connection is a
/// child task of it for as long as the connection is open, beside the connections' async work
/// (``ConnectionTasks``). Each connection keeps its handler pipeline: the frames never leave
/// the event loop.
struct LegacyListener: Sendable {
    /// The connections, each admitted and set up when it arrives here.
    private let server: NIOAsyncChannel<any Channel, Never>
    /// The connections' async work (the client-certificate checks, the feedback drains).
    private let tasks: ConnectionTasks
    /// The bound address (useful with port 0).
    let localAddress: SocketAddress

    /// Accepts until ``stopAccepting()``; each connection is a child task that ends when the
    /// connection has closed (a cancelled listener closes it). Returns once the socket is
    /// closed, every connection has closed and ``ConnectionTasks/finish()`` was called.
    func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask { await self.tasks.run() }
            try? await self.server.executeThenClose { connections in
                for try await connection in connections {
                    group.addTask { await Self.own(connection) }
                }
            }
        }
    }

    /// Closes the listening socket: ``run()``'s accept loop ends, open connections stay.
    func stopAccepting() async {
        try? await self.server.channel.close()
    }

    /// One connection's lifetime, as a child task of ``run()``.
    private static func own(_ connection: any Channel) async {
        await withTaskCancellationHandler {
            try? await connection.closeFuture.get()
        } onCancel: {
            connection.close(promise: nil)
        }
    }

    /// A connection closed at accept (a limit, a shutdown): it never reaches ``run()``.
    private struct Refused: Error {}

    /// - Parameters:
    ///   - listener: which port (its name in metrics and logs: `gateway`, `feedback`).
    ///   - tasks: where the connections' async work runs (the client-certificate check); run
    ///     by ``run()``.
    ///   - idleTimeout: how long a verified connection may go without reading (`nil`: for ever).
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
        idleTimeout: TimeAmount? = nil,
        usage: UsageRecorder?,
        proxyProtocol: ProxyProtocolPolicy = .off,
        allowHalfClosure: Bool = false,
        metrics: GatewayMetrics,
        group: any EventLoopGroup,
        logger: Logger,
        makeHandler: @escaping @Sendable (_ connectionLogger: Logger) -> any ChannelHandler
    ) async throws -> LegacyListener {
        let name = listener == .gateway ? "gateway" : "feedback"
        let refusals = RefusalLog(listener: name, metrics: metrics, logger: logger)

        /// TLS, the handshake half and the port's handler, for the connection's client.
        @Sendable func addConnectionHandlers(
            _ sync: ChannelPipeline.SynchronousOperations,
            channel: any Channel,
            client: SocketAddress?,
            handshakeTimeout: TimeAmount,
            after first: (any ChannelHandler)?
        ) throws {
            var connectionLogger = logger
            connectionLogger[metadataKey: "peer"] = "\(client.hostAndPort)"
            if client != channel.remoteAddress {
                connectionLogger[metadataKey: "load_balancer"] = "\(channel.remoteAddress.hostAndPort)"
            }
            let peer = VerifiedPeer()
            let handlers: [any ChannelHandler] = [
                tls.makeServerHandler(peer: peer, tasks: tasks, refusals: refusals, remoteAddress: client),
                ProviderHandshakeHandler(
                    peer: peer,
                    registry: registry,
                    timeout: handshakeTimeout,
                    port: listener,
                    usage: usage,
                    refusals: refusals,
                    client: client,
                    idleTimeout: idleTimeout,
                    logger: connectionLogger
                ),
                makeHandler(connectionLogger),
            ]
            if let first {
                try sync.addHandlers(handlers, position: .after(first))
            } else {
                try sync.addHandlers(handlers)
            }
        }

        let server = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelOption(.allowRemoteHalfClosure, value: allowHalfClosure)
            .bind(host: host, port: port) { channel -> EventLoopFuture<any Channel> in
                // A load balancer's connection names its client in a PROXY header first; until
                // then it counts against the global limits only.
                let fromLoadBalancer = proxyProtocol.expectsHeader(from: channel.remoteAddress)
                if let refusal = registry.admit(channel, limits: admission, attributed: !fromLoadBalancer) {
                    refusals.refused(refusal, peer: channel.remoteAddress, admission: admission)
                    return channel.close().flatMapThrowing { throw Refused() }
                }
                return channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    guard fromLoadBalancer else {
                        let detector = UnexpectedProxyHeaderHandler { version in
                            refusals.unexpectedProxyHeader(version: version, peer: channel.remoteAddress)
                        }
                        try sync.addHandler(detector)
                        try addConnectionHandlers(
                            sync,
                            channel: channel,
                            client: channel.remoteAddress,
                            handshakeTimeout: handshakeTimeout,
                            after: detector
                        )
                        return channel
                    }
                    let loadBalancer = channel.remoteAddress
                    // The header and the TLS handshake share one timeout from the accept: a
                    // header trickled in does not buy the handshake a fresh one.
                    let accepted = NIODeadline.now()
                    let header = ProxyHeaderHandler(timeout: handshakeTimeout) { sync, client in
                        if let refusal = registry.attribute(channel, to: client, limits: admission) {
                            refusals.refused(refusal, peer: client, admission: admission)
                            throw ProxyHeaderHandler.Refusal.limit
                        }
                        let first = try sync.handler(type: ProxyHeaderHandler.self)
                        let remaining = max(.zero, handshakeTimeout - (NIODeadline.now() - accepted))
                        try addConnectionHandlers(
                            sync,
                            channel: channel,
                            client: client,
                            handshakeTimeout: remaining,
                            after: first
                        )
                    } refused: { refusal, detail in
                        if refusal != .limit {
                            refusals.proxyHeaderRefused(refusal, detail: detail, loadBalancer: loadBalancer)
                        }
                    }
                    try sync.addHandler(header)
                    return channel
                }
            }
        return LegacyListener(server: server, tasks: tasks, localAddress: server.channel.localAddress!)
    }
}

/// What a listener refuses, counted each and logged at most once per interval per kind (with
/// how many were left out): refusals come from unauthenticated peers (anyone can mint a
/// certificate from a CA of their own), and a flood must not become a flood of log lines.
/// - Connections closed at accept by a limit.
/// - A client certificate that is not trusted or resolves to no tenant: the reason names the
///   certificate by its `UID=` (at most 128 characters) and fingerprint.
/// - A client that offers no TLS version the listener accepts (PushSharp 2.x, PHP before 7.2
///   without `tls.allowLegacyTLS`): the line names the key that would accept it; otherwise the
///   operator would see nothing and the provider only failed handshakes.
/// - A connection from a configured load balancer without a valid PROXY header, and a PROXY
///   header from a peer that is not one (the line names `proxyProtocol.loadBalancers`).
final class RefusalLog: Sendable {
    private let listener: String
    private let metrics: GatewayMetrics
    private let logger: Logger
    private let connections: LogRateLimit
    private let certificates: LogRateLimit
    private let versions: LogRateLimit
    private let proxyHeaders: LogRateLimit

    init(listener: String, metrics: GatewayMetrics, logger: Logger, interval: TimeAmount = .seconds(10)) {
        self.listener = listener
        self.metrics = metrics
        self.logger = logger
        self.connections = LogRateLimit(interval: interval)
        self.certificates = LogRateLimit(interval: interval)
        self.versions = LogRateLimit(interval: interval)
        self.proxyHeaders = LogRateLimit(interval: interval)
    }

    func certificateRefused(_ reason: String, resumed: Bool = false, peer: SocketAddress?) {
        self.metrics.handshakeRefused()
        guard let suppressed = self.certificates.admit() else { return }
        self.logger.warning(
            resumed
                ? "refusing a resumed TLS session's client certificate"
                : "refusing a client certificate during the TLS handshake",
            metadata: [
                "listener": "\(self.listener)",
                "reason": "\(reason)",
                "peer": "\(peer.hostAndPort)",
                "refused_since_last_line": "\(suppressed)",
            ]
        )
    }

    func versionRefused(peer: SocketAddress?) {
        self.metrics.tlsVersionRefused(listener: self.listener)
        guard let suppressed = self.versions.admit() else { return }
        self.logger.warning(
            "refusing a TLS handshake: the client offers no TLS version this listener accepts (TLS 1.2 by default); tls.allowLegacyTLS (APNS_BRIDGE_TLS_ALLOW_LEGACY_TLS=true) accepts TLS 1.0 and 1.1, tls.allowTLS13 accepts TLS 1.3",
            metadata: [
                "listener": "\(self.listener)",
                "peer": "\(peer.hostAndPort)",
                "refused_since_last_line": "\(suppressed)",
            ]
        )
    }

    /// A PROXY protocol header from a peer that is not a listed load balancer: most likely a
    /// balancer added without listing it.
    func unexpectedProxyHeader(version: Int, peer: SocketAddress?) {
        self.metrics.proxyHeaderRefused(listener: self.listener, reason: "unlisted_peer")
        guard let suppressed = self.proxyHeaders.admit() else { return }
        self.logger.warning(
            "refusing a PROXY protocol header from a peer that is not a listed load balancer; list the balancer's address in proxyProtocol.loadBalancers (APNS_BRIDGE_PROXY_PROTOCOL_LOAD_BALANCERS)",
            metadata: [
                "listener": "\(self.listener)",
                "version": "\(version)",
                "peer": "\(peer.hostAndPort)",
                "refused_since_last_line": "\(suppressed)",
            ]
        )
    }

    /// Whether a handshake error is BoringSSL's "no common protocol version".
    static func isVersionRefusal(_ error: any Error) -> Bool {
        guard case NIOSSLError.handshakeFailed(let failure) = error else { return false }
        let text = "\(failure)"
        return text.contains("UNSUPPORTED_PROTOCOL") || text.contains("WRONG_VERSION_NUMBER")
    }

    /// A connection from a configured load balancer without a valid PROXY header in time.
    func proxyHeaderRefused(_ refusal: ProxyHeaderHandler.Refusal, detail: String, loadBalancer: SocketAddress?) {
        self.metrics.proxyHeaderRefused(listener: self.listener, reason: refusal.rawValue)
        guard let suppressed = self.proxyHeaders.admit() else { return }
        self.logger.warning(
            "refusing a connection from a load balancer: no valid PROXY protocol header (is send-proxy-v2 set on its server lines?)",
            metadata: [
                "listener": "\(self.listener)",
                "reason": "\(refusal.rawValue)",
                "detail": "\(detail.prefix(200))",
                "load_balancer": "\(loadBalancer.hostAndPort)",
                "refused_since_last_line": "\(suppressed)",
            ]
        )
    }

    func refused(_ refusal: ConnectionRegistry.Refusal, peer: SocketAddress?, admission: ConnectionAdmission) {
        guard refusal != .shuttingDown else { return }
        self.metrics.connectionRefused(listener: self.listener, reason: refusal.rawValue)
        guard let suppressed = self.connections.admit() else { return }
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
                "peer": "\(peer.hostAndPort)",
                "refused_since_last_line": "\(suppressed)",
            ]
        )
    }
}

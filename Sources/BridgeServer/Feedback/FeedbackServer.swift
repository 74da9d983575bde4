import BridgeCore
import LegacyProtocol
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Synchronization

/// The feedback listener: TLS on port 2196 (CONTRACT §3).
///
/// On connect, the client certificate names the tenant (the gateway's resolver); the server
/// writes every pending tuple of that tenant and environment, streamed from the store a batch
/// at a time, and closes. Nothing is read from the poller. A batch's entries are deleted only
/// after its bytes were written and flushed, and only once the drain is over (see
/// ``FeedbackStore/drain(tenant:environment:options:deliver:finish:)``).
public final class FeedbackServer: Sendable {
    public let configuration: FeedbackConfiguration
    public let localAddress: SocketAddress
    private let serverChannel: any Channel
    private let registry: ConnectionRegistry
    private let drains: DrainCounter
    private let logger: Logger

    private init(
        configuration: FeedbackConfiguration,
        serverChannel: any Channel,
        registry: ConnectionRegistry,
        drains: DrainCounter,
        logger: Logger
    ) {
        self.configuration = configuration
        self.serverChannel = serverChannel
        self.localAddress = serverChannel.localAddress!
        self.registry = registry
        self.drains = drains
        self.logger = logger
    }

    /// Poller connections currently open.
    public var connectionCount: Int { self.registry.count }

    public static func start(
        configuration: FeedbackConfiguration,
        store: any FeedbackStore,
        tenantResolver: any TenantResolver,
        tlsContext: LegacyTLSContext? = nil,
        usage: UsageRecorder? = nil,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns-bridge.feedback")
    ) async throws -> FeedbackServer {
        let tls = try tlsContext ?? LegacyTLSContext(configuration: configuration.tls, tenantResolver: tenantResolver, logger: logger)
        let registry = ConnectionRegistry(gauge: GatewayMetrics.shared.feedbackConnections)
        let drains = DrainCounter()
        let serverChannel = try await LegacyListener.bind(
            listener: .feedback,
            host: configuration.host,
            port: configuration.port,
            tls: tls,
            registry: registry,
            admission: configuration.admission,
            handshakeTimeout: configuration.handshakeTimeout,
            usage: usage,
            group: group,
            logger: logger
        ) { connectionLogger in
            FeedbackConnectionHandler(
                configuration: configuration,
                store: store,
                drains: drains,
                usage: usage,
                logger: connectionLogger
            )
        }
        let server = FeedbackServer(
            configuration: configuration,
            serverChannel: serverChannel,
            registry: registry,
            drains: drains,
            logger: logger
        )
        logger.info("feedback service listening", metadata: ["address": "\(server.localAddress)"])
        return server
    }

    /// Stops accepting, closes every poller connection (what a poller already took is deleted,
    /// the rest stays pending), and waits for the drains to settle in the store.
    public func close() async {
        let channels = self.registry.closeAdmission()
        try? await self.serverChannel.close()
        for channel in channels {
            try? await channel.close()
        }
        await self.drains.waitUntilIdle()
    }
}

/// Drains in progress, so that a shutdown waits for them to settle in the store before the
/// store closes.
final class DrainCounter: Sendable {
    private struct State {
        var active = 0
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Mutex(State())

    func begin() { self.state.withLock { $0.active += 1 } }

    func end() {
        let waiters = self.state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.active -= 1
            guard state.active == 0 else { return [] }
            defer { state.idleWaiters = [] }
            return state.idleWaiters
        }
        waiters.forEach { $0.resume() }
    }

    func waitUntilIdle() async {
        await withCheckedContinuation { continuation in
            let idle = self.state.withLock { state in
                if state.active == 0 { return true }
                state.idleWaiters.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }
}

/// One poller connection: at ``ProviderVerified`` (the shared handshake adapter's event) it
/// hands the channel to a task that drains the tenant's list into it. Whatever the poller sends
/// is dropped.
final class FeedbackConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let configuration: FeedbackConfiguration
    private let store: any FeedbackStore
    private let drains: DrainCounter
    private let usage: UsageRecorder?
    private var logger: Logger

    init(
        configuration: FeedbackConfiguration,
        store: any FeedbackStore,
        drains: DrainCounter,
        usage: UsageRecorder?,
        logger: Logger
    ) {
        self.configuration = configuration
        self.store = store
        self.drains = drains
        self.usage = usage
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // The feedback service takes no commands.
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.logger.debug("feedback connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let verified = event as? ProviderVerified {
            self.logger[metadataKey: "tenant"] = "\(verified.tenant.name)"
            self.serve(verified.tenant, channel: context.channel)
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func serve(_ tenant: Tenant, channel: any Channel) {
        let store = self.store
        let configuration = self.configuration
        let logger = self.logger
        let drains = self.drains
        let usage = self.usage
        drains.begin()
        Task {
            defer { drains.end() }
            do {
                let result = try await store.drain(
                    tenant: tenant.name,
                    environment: tenant.environment,
                    options: configuration.drain
                ) { tuples in
                    var bytes = channel.allocator.buffer(capacity: tuples.reduce(0) { $0 + 6 + $1.deviceToken.readableBytes })
                    for tuple in tuples {
                        bytes.writeFeedbackTuple(tuple)
                    }
                    // A poller that stops reading fills the socket buffer and the write waits:
                    // give up after the write timeout.
                    let timeout = channel.eventLoop.scheduleTask(in: configuration.writeTimeout) {
                        channel.close(promise: nil)
                    }
                    defer { timeout.cancel() }
                    try await channel.writeAndFlush(bytes)
                    GatewayMetrics.shared.feedbackTuplesDelivered(tuples.count)
                } finish: {
                    try? await channel.close()
                }
                if !result.completed {
                    channel.close(promise: nil)
                }
                usage?.feedbackPolled(tenant: tenant.name, delivered: result.delivered)
                logger.info(
                    result.completed ? "feedback list served" : "feedback poller went away before the end of the list",
                    metadata: ["environment": "\(tenant.environment.rawValue)", "tuples": "\(result.delivered)"]
                )
            } catch {
                logger.error("feedback store failed; closing the poller's connection", metadata: ["error": "\(error)"])
                channel.close(promise: nil)
            }
        }
    }
}

@available(*, unavailable)
extension FeedbackConnectionHandler: Sendable {}

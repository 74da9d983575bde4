import BridgeCore
import LegacyProtocol
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Synchronization

/// The feedback listener: TLS on port 2196 (docs/feedback.md).
///
/// On connect, the client certificate names the tenant (the gateway's resolver); the server
/// writes every pending tuple of that tenant and environment, streamed from the store a batch
/// at a time, and closes (docs/protocol.md#closing: the poller gets `closeDelay` to close
/// first). Nothing is read from the poller. A batch's entries are deleted only after its bytes
/// were written and flushed, and the last ones only after the close (see
/// ``FeedbackStore/drain(tenant:environment:options:pollerConnected:deliver:finish:)``).
///
/// Run ``run()`` while it serves: it accepts, and each connection, each handshake's
/// client-certificate check and each drain is one of its child tasks. ``close()`` ends it.
package final class FeedbackServer: Sendable {
    package let configuration: FeedbackConfiguration
    package let localAddress: SocketAddress
    private let listener: LegacyListener
    private let registry: ConnectionRegistry
    private let tasks: ConnectionTasks
    private let logger: Logger

    private init(
        configuration: FeedbackConfiguration,
        listener: LegacyListener,
        registry: ConnectionRegistry,
        tasks: ConnectionTasks,
        logger: Logger
    ) {
        self.configuration = configuration
        self.listener = listener
        self.localAddress = listener.localAddress
        self.registry = registry
        self.tasks = tasks
        self.logger = logger
    }

    /// Accepts pollers, each connection a child task for as long as it is open, beside the
    /// connections' async work (the client-certificate checks and the drains), until
    /// ``close()``; then returns when the last has ended. Pollers wait for it: run it from
    /// when the server starts.
    package func run() async {
        await self.listener.run()
    }

    /// Poller connections currently open.
    package var connectionCount: Int { self.registry.count }

    package static func start(
        configuration: FeedbackConfiguration,
        store: any FeedbackStore,
        tenantResolver: any TenantResolver,
        tlsContext: LegacyTLSContext? = nil,
        usage: UsageRecorder? = nil,
        metrics: GatewayMetrics = GatewayMetrics(),
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns-bridge.feedback")
    ) async throws -> FeedbackServer {
        let tls =
            try tlsContext
            ?? LegacyTLSContext(configuration: configuration.tls, tenantResolver: tenantResolver, logger: logger)
        let registry = ConnectionRegistry(gauge: metrics.feedbackConnections)
        let tasks = ConnectionTasks()
        let listener = try await LegacyListener.bind(
            listener: .feedback,
            host: configuration.host,
            port: configuration.port,
            tls: tls,
            tasks: tasks,
            registry: registry,
            admission: configuration.admission,
            handshakeTimeout: configuration.handshakeTimeout,
            usage: usage,
            proxyProtocol: configuration.proxyProtocol,
            metrics: metrics,
            group: group,
            logger: logger
        ) { connectionLogger in
            FeedbackConnectionHandler(
                configuration: configuration,
                store: store,
                tasks: tasks,
                closeNotifyWait: { tls.closeNotifyWait },
                usage: usage,
                metrics: metrics,
                logger: connectionLogger
            )
        }
        let server = FeedbackServer(
            configuration: configuration,
            listener: listener,
            registry: registry,
            tasks: tasks,
            logger: logger
        )
        logger.info(
            "feedback service listening",
            metadata: [
                "address": "\(server.localAddress.hostAndPort)",
                "proxy_protocol_from": "\(configuration.proxyProtocol)",
            ]
        )
        return server
    }

    /// Stops accepting, closes every poller connection (what a poller already took is deleted,
    /// the rest stays pending), and waits for the drains to settle in the store (``run()`` has
    /// then returned).
    package func close() async {
        let channels = self.registry.closeAdmission()
        await self.listener.stopAccepting()
        for channel in channels {
            try? await channel.close()
        }
        await self.tasks.finish()
    }
}

/// One poller connection: at ``ProviderVerified`` (the shared handshake adapter's event) it
/// starts a drain of the tenant's list into the channel, one of the listener's tasks. Whatever the poller sends
/// is dropped.
final class FeedbackConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    private let configuration: FeedbackConfiguration
    private let store: any FeedbackStore
    private let tasks: ConnectionTasks
    /// The listener's close-notify wait as last loaded (`tls.closeNotifyWaitSeconds`).
    private let closeNotifyWait: @Sendable () -> TimeAmount
    private let usage: UsageRecorder?
    private let metrics: GatewayMetrics
    private var logger: Logger

    init(
        configuration: FeedbackConfiguration,
        store: any FeedbackStore,
        tasks: ConnectionTasks,
        closeNotifyWait: @escaping @Sendable () -> TimeAmount,
        usage: UsageRecorder?,
        metrics: GatewayMetrics,
        logger: Logger
    ) {
        self.configuration = configuration
        self.store = store
        self.tasks = tasks
        self.closeNotifyWait = closeNotifyWait
        self.usage = usage
        self.metrics = metrics
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
        let usage = self.usage
        let metrics = self.metrics
        let closeNotifyWait = tenant.closing.closeNotifyWait ?? self.closeNotifyWait()
        let started = self.tasks.start {
            var delivered = false
            // Closes the connection when the store gives no batch in time; renewed at each.
            var storeTimeout = Self.closeUnlessRenewed(channel, within: configuration.storeTimeout, logger: logger)
            defer { storeTimeout.cancel() }
            do {
                let result = try await store.drain(
                    tenant: tenant.name,
                    environment: tenant.environment,
                    options: configuration.drain,
                    pollerConnected: { channel.isActive }
                ) { tuples in
                    storeTimeout.cancel()
                    // One write per TLS record, each of whole tuples: no tuple straddles two
                    // records. Writes complete in order, so the last one's completion is all's.
                    let buffers = FeedbackTuple.recordSizedBuffers(tuples, allocator: channel.allocator)
                    // A poller that stops reading fills the socket buffer and the write waits:
                    // give up after the write timeout.
                    let timeout = channel.eventLoop.scheduleTask(in: configuration.writeTimeout) {
                        channel.close(promise: nil)
                    }
                    defer { timeout.cancel() }
                    for buffer in buffers.dropLast() {
                        channel.write(buffer, promise: nil)
                    }
                    if let last = buffers.last {
                        try await channel.writeAndFlush(last)
                    }
                    delivered = true
                    metrics.feedbackTuplesDelivered(tuples.count)
                    storeTimeout = Self.closeUnlessRenewed(channel, within: configuration.storeTimeout, logger: logger)
                } finish: {
                    storeTimeout.cancel()
                    // Some clients read until EOF: an empty list closes at once.
                    await Self.close(
                        channel,
                        after: delivered ? configuration.closeDelay : .zero,
                        closeNotifyWait: closeNotifyWait
                    )
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
        if !started {
            // The listener is closing: the list stays pending for the next poll.
            channel.close(promise: nil)
        }
    }

    /// Closes `channel` after `timeout` unless cancelled first: the store did not answer.
    private static func closeUnlessRenewed(
        _ channel: any Channel,
        within timeout: TimeAmount,
        logger: Logger
    ) -> Scheduled<Void> {
        channel.eventLoop.scheduleTask(in: timeout) {
            logger.warning(
                "the store gave no feedback batch in time; closing the poller's connection (the rest stays pending)",
                metadata: ["timeout_seconds": "\(Double(timeout.nanoseconds) / 1e9)"]
            )
            channel.close(promise: nil)
        }
    }

    /// docs/protocol.md#closing: the poller has `delay` to close first; then close_notify and
    /// FIN, and the full close when the poller answers with its own close_notify or after
    /// `closeNotifyWait`. Returns when the connection is closed.
    private static func close(_ channel: any Channel, after delay: TimeAmount, closeNotifyWait: TimeAmount) async {
        let closeOutput = channel.eventLoop.scheduleTask(in: delay) {
            channel.close(mode: .output, promise: nil)
            let close = channel.eventLoop.scheduleTask(in: closeNotifyWait) {
                channel.close(promise: nil)
            }
            channel.closeFuture.whenComplete { _ in close.cancel() }
        }
        try? await channel.closeFuture.get()
        closeOutput.cancel()
    }
}

@available(*, unavailable)
extension FeedbackConnectionHandler: Sendable {}

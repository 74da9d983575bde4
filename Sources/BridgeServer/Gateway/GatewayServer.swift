import BridgeCore
import Logging
import NIOCore
import NIOPosix
import NIOSSL

/// The gateway listener: TLS on port 2195 for legacy providers.
///
/// Start it with ``start(configuration:forwarder:resendRecords:feedback:tenantResolver:tlsContext:usage:metrics:group:logger:)``,
/// run ``run()`` while it serves (it accepts; each connection, and each handshake's
/// client-certificate check, is one of its child tasks), and stop it with
/// ``shutdownGracefully()`` (docs/protocol.md#shutdown) or ``close()``, which end ``run()``.
package final class GatewayServer: Sendable {
    package let configuration: GatewayConfiguration
    /// The bound address (useful with port 0).
    package let localAddress: SocketAddress
    private let listener: LegacyListener
    private let registry: ConnectionRegistry
    private let inFlight: InFlightWork
    private let tasks: ConnectionTasks
    private let logger: Logger

    private init(
        configuration: GatewayConfiguration,
        listener: LegacyListener,
        registry: ConnectionRegistry,
        inFlight: InFlightWork,
        tasks: ConnectionTasks,
        logger: Logger
    ) {
        self.configuration = configuration
        self.listener = listener
        self.localAddress = listener.localAddress
        self.registry = registry
        self.inFlight = inFlight
        self.tasks = tasks
        self.logger = logger
    }

    /// Accepts connections, each a child task for as long as it is open, beside the
    /// connections' async work (each handshake's client-certificate check), until
    /// ``shutdownGracefully()`` or ``close()``; then returns when the last connection has
    /// closed and the last task has ended. Handshakes wait for it: run it from when the server
    /// starts.
    package func run() async {
        await self.listener.run()
    }

    /// Connections still in their TLS handshake.
    package var handshakingCount: Int {
        self.registry.handshakingCount
    }

    /// Connections still in their TLS handshake counted against `address` (an IP address
    /// without port: the peer's, or the client's a PROXY header named).
    package func handshakingCount(from address: String) -> Int {
        self.registry.handshakingCount(from: address)
    }

    /// Notifications forwarded and store writes started, not yet finished, on every
    /// connection (also those already closed).
    package var inFlightCount: Int {
        self.inFlight.count
    }

    /// Provider connections currently open.
    package var connectionCount: Int {
        self.registry.count
    }

    package static func start(
        configuration: GatewayConfiguration,
        forwarder: any NotificationForwarder,
        resendRecords: any ResendRecordStore,
        feedback: any FeedbackRecorder,
        tenantResolver: any TenantResolver,
        tlsContext: LegacyTLSContext? = nil,
        usage: UsageRecorder? = nil,
        metrics: GatewayMetrics = GatewayMetrics(),
        pushLog: PushLog? = nil,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns-bridge.gateway")
    ) async throws -> GatewayServer {
        let tls =
            try tlsContext
            ?? LegacyTLSContext(configuration: configuration.tls, tenantResolver: tenantResolver, logger: logger)
        let inFlight = InFlightWork()
        let dependencies = GatewayConnectionHandler.Dependencies(
            forwarder: forwarder,
            resendRecords: resendRecords,
            feedback: feedback,
            tenantResolver: tenantResolver,
            inFlight: inFlight,
            usage: usage,
            metrics: metrics,
            pushLog: pushLog,
            closeNotifyWait: { tls.closeNotifyWait }
        )
        let registry = ConnectionRegistry(gauge: metrics.gatewayConnections)
        let tasks = ConnectionTasks()

        let listener = try await LegacyListener.bind(
            listener: .gateway,
            host: configuration.host,
            port: configuration.port,
            tls: tls,
            tasks: tasks,
            registry: registry,
            admission: configuration.admission,
            handshakeTimeout: configuration.handshakeTimeout,
            idleTimeout: configuration.idleTimeout,
            usage: usage,
            proxyProtocol: configuration.proxyProtocol,
            allowHalfClosure: true,
            metrics: metrics,
            group: group,
            logger: logger
        ) { connectionLogger in
            GatewayConnectionHandler(configuration: configuration, dependencies: dependencies, logger: connectionLogger)
        }

        let server = GatewayServer(
            configuration: configuration,
            listener: listener,
            registry: registry,
            inFlight: inFlight,
            tasks: tasks,
            logger: logger
        )
        logger.info(
            "gateway listening",
            metadata: [
                "address": "\(server.localAddress.hostAndPort)",
                "proxy_protocol_from": "\(configuration.proxyProtocol)",
            ]
        )
        return server
    }

    /// docs/protocol.md#shutdown: stop accepting; stop reading; let in-flight notifications finish within
    /// the grace period; send each connection `08 0A id` and close. Returns when every
    /// connection is closed and the notifications of connections closed earlier are finished
    /// (with their store writes).
    ///
    /// Bounded: a connection still open at the grace period plus the drain time and a margin
    /// (its farewell waits for its resend records, or its loop ran the grace timer late) writes
    /// its farewell then, and is closed by force if it is still open a drain time and a margin
    /// later.
    package func shutdownGracefully() async {
        let started = ContinuousClock.now
        let channels = self.registry.closeAdmission()
        await self.listener.stopAccepting()
        self.logger.info("gateway shutting down", metadata: ["connections": "\(channels.count)"])
        let event = GatewayShutdownEvent(gracePeriod: self.configuration.shutdownGracePeriod)
        for channel in channels {
            channel.pipeline.fireUserInboundEventTriggered(event)
        }
        let margin = self.configuration.shutdownMargin
        await Self.waitForClose(channels, within: self.configuration.shutdownGracePeriod + margin)
        let late = channels.filter(\.isActive)
        if !late.isEmpty {
            self.logger.warning(
                "the shutdown's bound passed with connections open; farewells not yet written go out now",
                metadata: ["connections": "\(late.count)"]
            )
            for channel in late {
                try? await channel.eventLoop.submit {
                    channel.pipeline.fireUserInboundEventTriggered(GatewayShutdownDeadlineEvent())
                }.get()
            }
            await Self.waitForClose(late, within: margin)
        }
        for channel in late where channel.isActive {
            try? await channel.close()
        }
        let bound = Duration.nanoseconds(self.configuration.shutdownBound.nanoseconds)
        let remaining = bound - (ContinuousClock.now - started)
        if !(await self.inFlight.waitUntilIdle(timeout: max(remaining, .milliseconds(100)))) {
            self.logger.warning(
                "shutting down with notifications still in flight",
                metadata: ["in_flight": "\(self.inFlight.count)"]
            )
        }
        await self.tasks.finish()
    }

    /// After a configuration reload: each open connection resolves its client certificate
    /// again, and one that no longer resolves to a tenant (its tenant was removed), or whose
    /// tenant names upstream credentials not in `credentials`, is closed as at shutdown
    /// (docs/protocol.md#shutdown): its notifications in flight finish within the grace period, then it gets
    /// `08 0A id`. Other connections keep the settings they started with until they close.
    ///
    /// Returns when every connection has seen the review: from then on, the connections being
    /// closed forward nothing new.
    package func reviewTenants(credentials: Set<String>) async {
        let event = GatewayTenantReviewEvent(
            gracePeriod: self.configuration.shutdownGracePeriod,
            credentials: credentials
        )
        for channel in self.registry.openChannels {
            try? await channel.eventLoop.submit {
                channel.pipeline.fireUserInboundEventTriggered(event)
            }.get()
        }
    }

    /// Closes the listener and every connection at once, without farewells.
    package func close() async {
        let channels = self.registry.closeAdmission()
        await self.listener.stopAccepting()
        for channel in channels {
            try? await channel.close()
        }
        await self.tasks.finish()
    }

    private static func waitForClose(_ channels: [any Channel], within bound: TimeAmount) async {
        guard !channels.isEmpty else { return }
        let eventLoop = channels[0].eventLoop
        let all = EventLoopFuture.andAllComplete(channels.map(\.closeFuture), on: eventLoop)
        let timeout = eventLoop.makePromise(of: Void.self)
        let timer = eventLoop.scheduleTask(in: bound) { timeout.succeed() }
        all.cascade(to: timeout)
        try? await timeout.futureResult.get()
        timer.cancel()
    }
}

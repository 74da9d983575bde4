import Logging
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// A TLS HTTP/2 server (ALPN h2) that validates requests and answers like APNs, with scripted
/// faults (``MockAPNsScript``) and a ledger of what it received (``MockAPNsLedger``).
///
/// Tests and benchmarks use it as the upstream; operators use it (`apns-bridge mock-apns`) to
/// stage a migration without an Apple account.
package final class MockAPNsServer: Sendable {
    package let script: MockAPNsScript
    package let ledger: MockAPNsLedger
    /// The Live Activity channels of its broadcast and channel management APIs.
    package let channels: MockAPNsChannels
    private let serverChannel: any Channel
    private let shared: Shared

    /// State the child channel initializer and the server share.
    private final class Shared: Sendable {
        let connections = Mutex<[ObjectIdentifier: any Channel]>([:])
        let streamLimit: Mutex<Int>
        let nextConnectionID = Atomic<Int>(0)

        init(streamLimit: Int) {
            self.streamLimit = Mutex(streamLimit)
        }
    }

    private init(
        serverChannel: any Channel,
        script: MockAPNsScript,
        ledger: MockAPNsLedger,
        channels: MockAPNsChannels,
        shared: Shared
    ) {
        self.channels = channels
        self.serverChannel = serverChannel
        self.script = script
        self.ledger = ledger
        self.shared = shared
    }

    package var localAddress: SocketAddress { self.serverChannel.localAddress! }
    package var port: Int { self.localAddress.port! }
    package var connectionCount: Int { self.shared.connections.withLock { $0.count } }

    package static func start(
        configuration: MockAPNsConfiguration,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "apns-bridge.mock-apns")
    ) async throws -> MockAPNsServer {
        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: configuration.certificateChain.map { .certificate($0) },
            privateKey: .privateKey(configuration.privateKey)
        )
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2"]
        if let roots = configuration.clientCertificateTrustRoots {
            tls.trustRoots = roots
            tls.certificateVerification = .optionalVerification
        }
        // close_notify is not waited for long at close: the mock stops within a second even while
        // clients keep their connections open.
        tls.shutdownTimeout = .milliseconds(500)
        let sslContext = try NIOSSLContext(configuration: tls)
        let script = MockAPNsScript()
        let channels = MockAPNsChannels()
        let ledger = MockAPNsLedger(keepsRecords: configuration.recordsRequests, onAnswer: configuration.onAnswer)
        let validator = MockAPNsRequestValidator(
            verifier: AuthenticationTokenVerifier(keys: configuration.signingKeys),
            topics: configuration.topics,
            providerTokenMaximumAge: configuration.providerTokenMaximumAge
        )
        let shared = Shared(streamLimit: configuration.maximumConcurrentStreams)
        let now = configuration.now

        let serverChannel = try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                let connectionID = shared.nextConnectionID.wrappingAdd(1, ordering: .relaxed).newValue
                shared.connections.withLock { $0[ObjectIdentifier(channel)] = channel }
                channel.closeFuture.whenComplete { _ in
                    _ = shared.connections.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) }
                }
                ledger.count { $0.connectionsAccepted += 1 }
                var connectionLogger = logger
                connectionLogger[metadataKey: "mock_connection"] = "\(connectionID)"
                let limit = shared.streamLimit.withLock { $0 }
                return channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLServerHandler(context: sslContext))
                    try sync.addHandler(
                        PingDroppingHandler(
                            shouldDrop: { script.ignoresPings },
                            onPing: { dropped in
                                ledger.count {
                                    $0.pingsReceived += 1
                                    if dropped { $0.pingsIgnored += 1 }
                                }
                            }
                        )
                    )
                    var http2 = NIOHTTP2Handler.ConnectionConfiguration()
                    http2.initialSettings = [
                        HTTP2Setting(parameter: .maxConcurrentStreams, value: limit),
                        HTTP2Setting(parameter: .maxHeaderListSize, value: 8192),
                    ]
                    try sync.addHandler(NIOHTTP2Handler(mode: .server, connectionConfiguration: http2))
                    try sync.addHandler(
                        MockAPNsConnectionHandler(
                            connectionID: connectionID,
                            initialStreamLimit: limit,
                            validator: validator,
                            channels: channels,
                            script: script,
                            ledger: ledger,
                            now: now,
                            logger: connectionLogger
                        )
                    )
                }
            }
            .bind(host: configuration.host, port: configuration.port)
            .get()

        let server = MockAPNsServer(
            serverChannel: serverChannel,
            script: script,
            ledger: ledger,
            channels: channels,
            shared: shared
        )
        // As people write it (NIO's description is a debugging form).
        let host = server.localAddress.ipAddress ?? "?"
        let address = server.localAddress.protocol == .inet6 ? "[\(host)]:\(server.port)" : "\(host):\(server.port)"
        logger.info("mock APNs listening", metadata: ["address": "\(address)"])
        return server
    }

    /// Announces a new `MAX_CONCURRENT_STREAMS` on every connection (and uses it for new ones).
    package func setMaximumConcurrentStreams(_ limit: Int) {
        self.shared.streamLimit.withLock { $0 = limit }
        let channels = self.shared.connections.withLock { Array($0.values) }
        for channel in channels {
            channel.pipeline.fireUserInboundEventTriggered(MockAPNsStreamLimitChange(maximumConcurrentStreams: limit))
        }
    }

    /// Closes the listener and every connection, all at once: each connection's TLS shutdown
    /// waits at most half a second for the client's close_notify.
    package func close() async {
        try? await self.serverChannel.close()
        let channels = self.shared.connections.withLock { Array($0.values) }
        await withTaskGroup(of: Void.self) { group in
            for channel in channels {
                group.addTask { try? await channel.close() }
            }
        }
    }
}

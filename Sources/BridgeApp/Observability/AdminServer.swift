import BridgeCore
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
import ServiceLifecycle

/// The admin HTTP port (loopback by default): `GET /metrics` (Prometheus text format),
/// `GET /healthz` (200 while the process serves and its store answers, else 503 saying since
/// when the store has failed: docs/operations.md#store-outage), `GET /readyz` (200 when a usable upstream
/// connection exists, else 503), `POST /-/reload` (reloads the configuration: 200 with what
/// changed, or 422 with why the new configuration was refused), `GET /push-log` (the push log's
/// entries as JSON: docs/operations.md#did-it-go), `GET /` (the status page).
package final class AdminServer: Service, Sendable {
    package struct Probes: Sendable {
        var isReady: @Sendable () -> Bool
        /// What is wrong with the store, or `nil` while it answers.
        var storeProblem: @Sendable () -> String?
        /// Sets the gauges that are read rather than counted.
        var beforeScrape: @Sendable () -> Void
        /// Reloads the configuration: whether it was applied, and the report.
        var reload: (@Sendable () async -> (applied: Bool, report: String))?
        /// Renders the status page (HTML) for a request target (its query searches the push log).
        var statusPage: (@Sendable (_ uri: String) async -> String)?
        /// What `/push-log` reads; `nil` when the push log is off.
        var pushLog: PushLog?

        package init(
            isReady: @escaping @Sendable () -> Bool,
            storeProblem: @escaping @Sendable () -> String? = { nil },
            beforeScrape: @escaping @Sendable () -> Void = {},
            reload: (@Sendable () async -> (applied: Bool, report: String))? = nil,
            statusPage: (@Sendable (_ uri: String) async -> String)? = nil,
            pushLog: PushLog? = nil
        ) {
            self.isReady = isReady
            self.storeProblem = storeProblem
            self.beforeScrape = beforeScrape
            self.reload = reload
            self.statusPage = statusPage
            self.pushLog = pushLog
        }
    }

    /// A connection that sends no request for this long is closed (a scraper reconnects;
    /// a forgotten client must not hold a socket forever).
    package static let idleTimeout: TimeAmount = .seconds(30)

    package let localAddress: SocketAddress
    private let channel: any Channel
    private let logger: Logger

    private init(channel: any Channel, logger: Logger) {
        self.channel = channel
        self.localAddress = channel.localAddress!
        self.logger = logger
    }

    /// - Parameter registry: what `/metrics` exports; `nil` answers 404 there.
    package static func start(
        host: String,
        port: Int,
        probes: Probes,
        registry: PrometheusCollectorRegistry?,
        idleTimeout: TimeAmount = AdminServer.idleTimeout,
        logger: Logger
    ) async throws -> AdminServer {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(IdleStateHandler(allTimeout: idleTimeout))
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(
                        AdminRequestHandler(
                            probes: probes,
                            registry: registry,
                            policy: AdminRequestPolicy(listenHost: host)
                        )
                    )
                }
            }
            .bind(host: host, port: port)
            .get()
        let server = AdminServer(channel: channel, logger: logger)
        logger.info(
            "admin listening (/, /metrics, /healthz, /readyz, /push-log, POST /-/reload)",
            metadata: ["address": "\(server.localAddress.hostAndPort)"]
        )
        return server
    }

    package func run() async throws {
        try? await gracefulShutdown()
        await self.close()
    }

    package func close() async {
        try? await self.channel.close()
    }
}

/// Answers one admin request at a time on a keep-alive connection.
final class AdminRequestHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let probes: AdminServer.Probes
    private let registry: PrometheusCollectorRegistry?
    private let policy: AdminRequestPolicy
    private var request: HTTPRequestHead?

    init(probes: AdminServer.Probes, registry: PrometheusCollectorRegistry?, policy: AdminRequestPolicy) {
        self.probes = probes
        self.registry = registry
        self.policy = policy
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.request = head
        case .body:
            break
        case .end:
            guard let head = self.request else { return }
            self.request = nil
            if let refusal = self.policy.refusal(head) {
                self.respond(
                    context: context,
                    head: head,
                    (.forbidden, "text/plain; charset=utf-8", Array("refused: \(refusal)\n".utf8))
                )
                return
            }
            if let work = self.asynchronousAnswer(head) {
                // Answered when the work is done; NIO's pipelining handler holds a next request
                // on this connection until then.
                let promise = context.eventLoop.makePromise(of: Answer.self)
                promise.completeWithTask(work)
                promise.futureResult.assumeIsolated().whenSuccess { answer in
                    self.respond(context: context, head: head, answer)
                }
                return
            }
            self.respond(context: context, head: head, self.answer(head))
        }
    }

    typealias Answer = (HTTPResponseStatus, String, [UInt8])

    /// The answers that take a moment: the reload, the status page.
    private func asynchronousAnswer(_ head: HTTPRequestHead) -> (@Sendable () async -> Answer)? {
        let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
        if head.method == .POST, path == "/-/reload", let reload = self.probes.reload {
            return {
                let outcome = await reload()
                return (
                    outcome.applied ? .ok : .unprocessableEntity, "text/plain; charset=utf-8",
                    Array((outcome.report + "\n").utf8)
                )
            }
        }
        if head.method == .GET || head.method == .HEAD, path == "/", let statusPage = self.probes.statusPage {
            let uri = head.uri
            return { (.ok, "text/html; charset=utf-8", Array(await statusPage(uri).utf8)) }
        }
        return nil
    }

    private func respond(context: ChannelHandlerContext, head: HTTPRequestHead, _ answer: Answer) {
        let (status, contentType, body) = answer
        var headers = HTTPHeaders([("content-type", contentType), ("content-length", "\(body.count)")])
        if !head.isKeepAlive { headers.add(name: "connection", value: "close") }
        context.write(
            self.wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))),
            promise: nil
        )
        context.write(self.wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil)
        let keepAlive = head.isKeepAlive
        context.writeAndFlush(self.wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
            if !keepAlive { context.close(promise: nil) }
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)  // idle between requests (or a request that never ends)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func answer(_ head: HTTPRequestHead) -> (HTTPResponseStatus, String, [UInt8]) {
        let text = "text/plain; charset=utf-8"
        guard head.method == .GET || head.method == .HEAD else {
            return (.methodNotAllowed, text, Array("GET only (and POST /-/reload)\n".utf8))
        }
        switch head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri {
        case "/metrics":
            guard let registry = self.registry else {
                return (.notFound, text, Array("metrics are not enabled\n".utf8))
            }
            self.probes.beforeScrape()
            return (.ok, "text/plain; version=0.0.4; charset=utf-8", registry.emitToBuffer())
        case "/healthz":
            if let problem = self.probes.storeProblem() {
                return (.serviceUnavailable, text, Array("\(problem)\n".utf8))
            }
            return (.ok, text, Array("ok\n".utf8))
        case "/readyz":
            return self.probes.isReady()
                ? (.ok, text, Array("ready\n".utf8))
                : (.serviceUnavailable, text, Array("no usable upstream connection\n".utf8))
        case "/push-log":
            guard let pushLog = self.probes.pushLog else {
                return (.notFound, text, Array("the push log is off (pushLog.entries is 0)\n".utf8))
            }
            let query: PushLogQuery
            do {
                query = try PushLogQuery(uri: head.uri)
            } catch {
                return (.badRequest, text, Array("\(error)\n".utf8))
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            let body = (try? encoder.encode(PushLogPage(pushLog, query: query))) ?? Data("{}".utf8)
            return (.ok, "application/json", Array(body))
        default:
            return (.notFound, text, Array("not found: try /, /metrics, /healthz, /readyz or /push-log\n".utf8))
        }
    }
}

/// Which requests the admin port answers at all. It has no authentication and can reload the
/// configuration, so a web page the operator opens must not reach it through the browser:
/// - `Host` must name this admin port: an IP address, `localhost`, the configured listen host
///   or this machine's name. A page whose own name was made to resolve to 127.0.0.1 (DNS
///   rebinding) sends its own name, and is refused.
/// - `Origin`, when present (browsers send it with a cross-site `POST`, such as a text/plain
///   form aimed at `/-/reload`), must be this same address (`http://` and the `Host` value).
/// Clients that are not browsers (Prometheus, curl, `apns-bridge reload`) send neither or
/// matching ones. A refusal answers 403 and runs nothing.
struct AdminRequestPolicy: Sendable {
    /// The listen host as configured (`127.0.0.1`, `0.0.0.0`, a name).
    var listenHost: String
    /// This machine's name.
    var machineName: String = ProcessInfo.processInfo.hostName

    /// Why the request is refused; `nil` when it may be answered.
    func refusal(_ head: HTTPRequestHead) -> String? {
        let hosts = head.headers["host"]
        guard hosts.count <= 1 else { return "more than one Host header" }
        if let host = hosts.first, !self.allows(host: host) {
            return "Host \(LogLineEscaping.escaped(String(host.prefix(100)))) is not this admin port's address"
        }
        for origin in head.headers["origin"] {
            guard let host = hosts.first, origin.lowercased() == "http://" + host.lowercased() else {
                return "Origin \(LogLineEscaping.escaped(String(origin.prefix(100)))) is not this admin port"
            }
        }
        return nil
    }

    /// A `Host` value (`name`, `name:port`, `[v6]:port`) that names this admin port.
    func allows(host value: String) -> Bool {
        var name = Substring(value)
        if name.hasPrefix("[") {
            guard let end = name.firstIndex(of: "]") else { return false }
            name = name[name.index(after: name.startIndex)..<end]
        } else if let colon = name.lastIndex(of: ":") {
            name = name[..<colon]
        }
        let host = name.lowercased()
        if host == "localhost" || host == self.listenHost.lowercased() || host == self.machineName.lowercased() {
            return true
        }
        return (try? SocketAddress(ipAddress: host, port: 0)) != nil
    }
}

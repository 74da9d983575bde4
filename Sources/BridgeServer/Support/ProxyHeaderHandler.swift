import LegacyProtocol
import NIOCore
import ProxyProtocol

/// The first handler of a connection from a configured load balancer: it reads the PROXY
/// protocol header (``ProxyHeaderParser``) before any TLS byte, then hands the connection to
/// the rest of its pipeline, built for the client address the header names, and leaves.
///
/// A connection whose first bytes are not a valid header, or that sends none within the
/// handshake timeout, is closed without an answer: the load balancer is misconfigured (or the
/// peer is not one), and anything sent back would reach whoever is behind it as garbage. Bytes
/// beyond the header (a client's ClientHello in the same segment) go on to TLS as they came.
final class ProxyHeaderHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    enum Refusal: String, Sendable {
        /// The first bytes are not a PROXY header.
        case missing
        /// A PROXY header that does not parse, or is longer than the bound.
        case malformed
        /// No whole header within the timeout.
        case timeout
        /// The header's client address is over a listener limit (handshakes per address).
        case limit
    }

    /// Builds the rest of the pipeline after this handler for the client address; throws (a
    /// ``Refusal``) to close the connection instead.
    typealias Continue = (_ pipeline: ChannelPipeline.SynchronousOperations, _ client: SocketAddress?) throws -> Void

    private let timeout: TimeAmount
    private let proceed: Continue
    private let refused: (Refusal, _ detail: String) -> Void
    private var received: ByteBuffer?
    private var timer: Scheduled<Void>?
    private var finished = false

    init(timeout: TimeAmount, proceed: @escaping Continue, refused: @escaping (Refusal, _ detail: String) -> Void) {
        self.timeout = timeout
        self.proceed = proceed
        self.refused = refused
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.startTimer(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        self.startTimer(context: context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.timer?.cancel()
    }

    private func startTimer(context: ChannelHandlerContext) {
        guard self.timer == nil, !self.finished else { return }
        self.timer = context.eventLoop.assumeIsolated().scheduleTask(in: self.timeout) {
            self.refuse(
                .timeout,
                "no whole PROXY header within \(self.timeout.nanoseconds / 1_000_000) ms",
                context: context
            )
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.finished else { return }
        var bytes = self.unwrapInboundIn(data)
        if self.received == nil {
            self.received = bytes
        } else {
            self.received!.writeBuffer(&bytes)
        }
        let header: ProxyHeader?
        do {
            header = try ProxyHeaderParser.parse(&self.received!)
        } catch {
            let reason: Refusal = error == .missing ? .missing : .malformed
            self.refuse(reason, "\(error)", context: context)
            return
        }
        guard let header else { return }
        self.finished = true
        self.timer?.cancel()
        do {
            try self.proceed(context.pipeline.syncOperations, header.source ?? context.channel.remoteAddress)
        } catch let refusal as Refusal {
            self.refused(refusal, "the client address is over a limit")
            context.close(promise: nil)
            return
        } catch {
            context.close(promise: nil)
            return
        }
        let rest = self.received.take()
        if let rest, rest.readableBytes > 0 {
            context.fireChannelRead(self.wrapInboundOut(rest))
        }
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        // Nothing reaches the handlers after this one before the header is whole.
        if self.finished { context.fireChannelReadComplete() }
    }

    private func refuse(_ refusal: Refusal, _ detail: String, context: ChannelHandlerContext) {
        guard !self.finished else { return }
        self.finished = true
        self.timer?.cancel()
        self.received = nil
        self.refused(refusal, detail)
        context.close(promise: nil)
    }
}

extension ProxyHeaderHandler.Refusal: Error {}

extension Optional {
    /// The value, leaving `nil` behind.
    fileprivate mutating func take() -> Wrapped? {
        defer { self = nil }
        return self
    }
}

import BridgeCore
import BridgeServer
import BridgeTestSupport
import DevelopmentPKI
import LegacyProtocol
import Logging
import MetricsTestKit
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOSSL
import Testing

/// The gateway's channel handler on an `EmbeddedChannel`: no socket, no TLS (the shared
/// handshake adapter's `ProviderVerified` event starts it), and the timers driven by
/// `advanceTime(by:)`, so a test of a 60 s idle timeout takes no time at all.
@Suite("Gateway connection handler (EmbeddedChannel)")
struct GatewayConnectionHandlerTests {
    static let tenant = Tenant(name: "com.example.app", topic: "com.example.app", environment: .sandbox)

    /// A forwarder that answers each notification only when the test says which outcome.
    final class HeldForwarder: NotificationForwarder {
        private let received = NIOLockedValueBox(
            [(notification: ForwardedNotification, answer: EventLoopPromise<NotificationOutcome>)]()
        )

        func send(
            _ notification: ForwardedNotification,
            on eventLoop: any EventLoop,
            completion: @escaping @Sendable (NotificationOutcome) -> Void
        ) {
            let promise = eventLoop.makePromise(of: NotificationOutcome.self)
            self.received.withLockedValue { $0.append((notification, promise)) }
            promise.futureResult.whenSuccess(completion)
        }

        var ledger: [ForwardedNotification] {
            self.received.withLockedValue { $0.map(\.notification) }
        }

        func answer(_ index: Int, _ outcome: NotificationOutcome) {
            self.received.withLockedValue { $0[index].answer }.succeed(outcome)
        }
    }

    /// Records the closes the handler asks for; a close of the output stops here (an
    /// `EmbeddedChannel` cannot half-close), so the drain that follows it can be observed.
    final class CloseRecorder: ChannelOutboundHandler {
        typealias OutboundIn = ByteBuffer
        private(set) var modes: [CloseMode] = []

        func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
            self.modes.append(mode)
            if mode == .output {
                promise?.succeed()
            } else {
                context.close(mode: mode, promise: promise)
            }
        }
    }

    /// One handler on an embedded channel, its forwarder answering only when a test says so.
    final class Connection {
        let channel = EmbeddedChannel()
        let forwarder = HeldForwarder()
        let feedback = InMemoryFeedbackRecorder()
        let resendRecords = InMemoryResendRecordStore()
        let inFlight = InFlightWork()
        let configuration: GatewayConfiguration
        let closes = CloseRecorder()
        /// The handler's metrics, made from a factory the test reads.
        let metrics = TestMetrics()

        init(
            tenant: Tenant = GatewayConnectionHandlerTests.tenant,
            configure: (inout GatewayConfiguration) -> Void = { _ in }
        ) throws {
            let pki = try DevelopmentCA()
            var configuration = GatewayConfiguration.loopback(pki: pki)
            configure(&configuration)
            self.configuration = configuration
            let handler = GatewayConnectionHandler(
                configuration: configuration,
                dependencies: .init(
                    forwarder: self.forwarder,
                    resendRecords: self.resendRecords,
                    feedback: self.feedback,
                    tenantResolver: CertificateSubjectTenantResolver(environment: .sandbox),
                    inFlight: self.inFlight,
                    metrics: GatewayMetrics(factory: self.metrics),
                    closeNotifyWait: { [closeNotifyWait = configuration.tls.closeNotifyWait] in closeNotifyWait }
                ),
                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
            )
            try self.channel.pipeline.syncOperations.addHandler(self.closes)
            try self.channel.pipeline.syncOperations.addHandler(handler)
            try self.channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 2195)).wait()
            let certificate = try pki.providerIdentity(bundleID: Self.tenantName).certificate
            self.channel.pipeline.fireUserInboundEventTriggered(
                ProviderVerified(tenant: tenant, certificate: certificate)
            )
        }

        static let tenantName = "com.example.app"

        /// Writes frames as the provider would.
        func send(_ identifiers: ClosedRange<UInt32>, token: UInt8? = nil) throws {
            var bytes = ByteBuffer()
            for identifier in identifiers {
                bytes.writeNotificationFrame(
                    NotificationFrame(
                        command: .itemized,
                        identifier: NotificationIdentifier(rawValue: identifier),
                        deviceToken: ByteBuffer(repeating: token ?? UInt8(truncatingIfNeeded: identifier), count: 32),
                        payload: ByteBuffer(string: #"{"aps":{}}"#)
                    )
                )
            }
            try self.channel.writeInbound(bytes)
        }

        /// Answers the `index`th notification the forwarder received.
        func answer(_ index: Int, _ outcome: NotificationOutcome) {
            self.forwarder.answer(index, outcome)
            self.channel.embeddedEventLoop.run()
        }

        /// Ends the test: closes the channel (if the handler has not) and tells whether anything
        /// was left unread in either direction.
        func finish() throws -> EmbeddedChannel.LeftOverState {
            try self.channel.finish(acceptAlreadyClosed: true)
        }

        /// Everything the handler wrote to the provider so far.
        func written() throws -> ByteBuffer {
            var all = ByteBuffer()
            while var part = try self.channel.readOutbound(as: ByteBuffer.self) {
                all.writeBuffer(&part)
            }
            return all
        }
    }

    @Test(
        "A failure upstream: the error-response names it; close_notify only after the drain time, the close after the close-notify wait"
    )
    func failureFarewellAndDrain() throws {
        let connection = try Connection()
        try connection.send(1...2)
        #expect(connection.forwarder.ledger.count == 2)
        connection.answer(0, .accepted)
        #expect(try connection.written().readableBytes == 0, "an accepted notification gets no answer")
        connection.answer(1, .rejected(.invalidToken))
        var written = try connection.written()
        #expect(
            written.readErrorResponse()
                == ErrorResponsePacket(status: .invalidToken, identifier: NotificationIdentifier(rawValue: 2))
        )
        #expect(connection.closes.modes == [], "no close_notify beside the packet (docs/protocol.md#closing)")
        #expect(connection.channel.isActive, "still reading and dropping for the drain time")
        try connection.send(3...3)
        #expect(connection.forwarder.ledger.count == 2, "nothing is forwarded after the failure")
        connection.channel.embeddedEventLoop.advanceTime(by: connection.configuration.errorDrainTime - .milliseconds(1))
        #expect(connection.closes.modes == [])
        connection.channel.embeddedEventLoop.advanceTime(by: .milliseconds(1))
        #expect(connection.closes.modes == [.output], "close_notify and FIN at the drain's end; still reading")
        try connection.send(4...4)
        #expect(connection.forwarder.ledger.count == 2)
        connection.channel.embeddedEventLoop.advanceTime(
            by: connection.configuration.tls.closeNotifyWait - .milliseconds(1)
        )
        #expect(connection.channel.isActive, "waiting for the provider's close_notify")
        connection.channel.embeddedEventLoop.advanceTime(by: .milliseconds(1))
        #expect(connection.closes.modes == [.output, .all])
        #expect(!connection.channel.isActive)
        #expect(connection.inFlight.count == 0)
        #expect(connection.metrics.counterTotal(label: "apns_bridge_notifications_received_total") == 2)
        #expect(
            connection.metrics.counterTotal(label: "apns_bridge_error_responses_total", dimensions: [("status", "8")])
                == 1
        )
        #expect(
            connection.metrics.counterTotal(
                label: "apns_bridge_notifications_total",
                dimensions: [("tenant", Connection.tenantName), ("outcome", "accepted")]
            ) == 1
        )
        #expect(try connection.finish().isClean, "nothing left unread in either direction")
    }

    @Test("A tenant's own close: no drain and no close-notify wait close the connection with the packet, as Apple did")
    func tenantQuickClose() throws {
        var tenant = Self.tenant
        tenant.closing = ClosingOverrides(errorDrain: .zero, closeNotifyWait: .zero)
        let connection = try Connection(tenant: tenant)
        try connection.send(1...1)
        connection.answer(0, .rejected(.invalidToken))
        var written = try connection.written()
        #expect(written.readErrorResponse()?.status == .invalidToken)
        #expect(connection.closes.modes == [.output, .all], "close_notify, then the close, with no time between")
        #expect(!connection.channel.isActive)
        #expect(try connection.finish().isClean, "nothing left unread in either direction")
    }

    @Test("The provider's input ends during the drain: the close comes at the drain's end, with no close-notify wait")
    func inputEndsDuringDrain() throws {
        let connection = try Connection()
        try connection.send(1...1)
        connection.answer(0, .rejected(.invalidToken))
        #expect(try connection.written().readableBytes == 6)
        connection.channel.pipeline.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        #expect(connection.channel.isActive, "a client that half-closed may still be reading its packet")
        connection.channel.embeddedEventLoop.advanceTime(by: connection.configuration.errorDrainTime)
        #expect(connection.closes.modes == [.all])
        #expect(!connection.channel.isActive)
        #expect(try connection.finish().isClean, "nothing left unread in either direction")
    }

    @Test("The idle timer's event closes a silent connection, but not while a notification is in flight")
    func idleTimeout() throws {
        // The timer is the handshake's to start (ProviderHandshakeHandlerTests); NIO's
        // IdleStateHandler reads the wall clock, not the embedded loop's, so its event is fired
        // here by hand, and the handler's answer to it is what is tested.
        let connection = try Connection()
        try connection.send(1...1)
        connection.channel.pipeline.fireUserInboundEventTriggered(IdleStateHandler.IdleStateEvent.read)
        #expect(connection.channel.isActive, "a notification is in flight")
        connection.answer(0, .accepted)
        connection.channel.pipeline.fireUserInboundEventTriggered(IdleStateHandler.IdleStateEvent.write)
        #expect(connection.channel.isActive, "only a read timeout counts")
        connection.channel.pipeline.fireUserInboundEventTriggered(IdleStateHandler.IdleStateEvent.read)
        #expect(!connection.channel.isActive)
        #expect(try connection.finish().isClean, "nothing left unread in either direction")
    }

    @Test(
        "Shutdown with notifications in flight: status 10 at the grace period's end names the last one completed; the rest become resend records"
    )
    func shutdownGrace() throws {
        let connection = try Connection()
        try connection.send(1...3)
        connection.answer(0, .accepted)
        connection.channel.pipeline.fireUserInboundEventTriggered(GatewayShutdownEvent(gracePeriod: .seconds(10)))
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(try connection.written().readableBytes == 0, "within the grace period: waiting")
        connection.answer(1, .accepted)
        #expect(try connection.written().readableBytes == 0, "notification 3 is still in flight")
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        var written = try connection.written()
        #expect(
            written.readErrorResponse()
                == ErrorResponsePacket(status: .shutdown, identifier: NotificationIdentifier(rawValue: 2))
        )
        // Notification 3 is in flight, and some clients resend the one status 10 names.
        #expect(connection.resendRecords.count == 2)
        connection.answer(2, .accepted)
        connection.channel.embeddedEventLoop.advanceTime(
            by: connection.configuration.errorDrainTime + connection.configuration.tls.closeNotifyWait
        )
        #expect(!connection.channel.isActive)
        #expect(try connection.finish().isClean, "nothing left unread in either direction")
    }

    @Test("Shutdown with nothing in flight: status 10 at once")
    func shutdownIdle() throws {
        let connection = try Connection()
        connection.channel.pipeline.fireUserInboundEventTriggered(GatewayShutdownEvent(gracePeriod: .seconds(10)))
        var written = try connection.written()
        #expect(written.readErrorResponse() == ErrorResponsePacket(status: .shutdown, identifier: .zero))
        #expect(try connection.finish().isClean, "nothing left unread in either direction")
    }

    @Test("A 410: the token goes on the feedback list, and the connection that ended closes once the entry is stored")
    func unregistered() throws {
        let connection = try Connection()
        try connection.send(1...1)
        connection.channel.pipeline.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        #expect(connection.channel.isActive, "a notification is in flight")
        connection.answer(0, .unregistered(timestamp: 1_700_000_000))
        #expect(connection.feedback.allEntries.count == 1)
        #expect(!connection.channel.isActive, "everything answered after the end of input: closed")
        #expect(try connection.written().readableBytes == 0, "a 410 is no error-response")
        #expect(try connection.finish().isClean, "nothing left unread in either direction")
    }

    @Test(
        "A resend answered from its record's 410 is no new answer: nothing goes upstream, the feedback list is not written again (a poller may have taken the entry), the outcome and entry counters do not count it"
    )
    func rememberedUnregistered() throws {
        let connection = try Connection()
        let frame = NotificationFrame(
            command: .itemized,
            identifier: NotificationIdentifier(rawValue: 7),
            deviceToken: ByteBuffer(repeating: 7, count: 32),
            payload: ByteBuffer(string: #"{"aps":{}}"#)
        )
        try connection.resendRecords.remember(
            [
                ResendRecord(
                    key: ResendRecordKey(tenant: Connection.tenantName, frame: frame),
                    outcome: .unregistered(timestamp: 1_700_000_000)
                )
            ],
            on: connection.channel.eventLoop
        ).wait()
        try connection.send(7...7)
        connection.channel.embeddedEventLoop.run()
        #expect(connection.forwarder.ledger.isEmpty, "answered from the record")
        #expect(connection.feedback.allEntries.isEmpty, "the first answer wrote the entry; this one does not")
        #expect(connection.inFlight.count == 0, "the notification is done")
        #expect(connection.metrics.counterTotal(label: "apns_bridge_resends_deduplicated_total") == 1)
        #expect(connection.metrics.counterTotal(label: "apns_bridge_feedback_entries_recorded_total") == 0)
        #expect(
            connection.metrics.counterTotal(
                label: "apns_bridge_notifications_total",
                dimensions: [("tenant", Connection.tenantName), ("outcome", "unregistered")]
            ) == 0
        )
        #expect(try connection.finish().isClean, "nothing left unread in either direction")
    }
}

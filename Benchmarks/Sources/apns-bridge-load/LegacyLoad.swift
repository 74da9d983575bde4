import DevelopmentPKI
import LegacyProtocol
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Synchronization

/// C legacy provider connections (TLS 1.2 with a client certificate, as old providers) that
/// send their share of N command-2 notifications: as fast as the connection takes them, or
/// at a fixed total rate.
final class LegacyLoad: @unchecked Sendable {
    struct Plan: Sendable {
        var connections: Int
        var notifications: Int
        var payloadSize: Int
        /// Notifications per second over all connections; nil: as fast as possible.
        var rate: Double?
        /// Token numbers modulo this (nghttpd), or unique per notification (nil).
        var distinctTokens: Int?
    }

    let plan: Plan
    let tracker: ArrivalTracker
    private(set) var channels: [any Channel] = []
    /// How many notifications each of `channels` sends.
    private(set) var shares: [Int] = []
    let errorResponses = Atomic<Int>(0)
    let closedEarly = Atomic<Int>(0)

    init(plan: Plan, tracker: ArrivalTracker) {
        self.plan = plan
        self.tracker = tracker
    }

    /// Opens every connection and waits for each TLS handshake; nothing is sent yet.
    func connect(port: Int, workspace: Workspace, group: any EventLoopGroup) async throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates([workspace.pki.caCertificate])
        tls.maximumTLSVersion = .tlsv12
        tls.certificateChain = [.certificate(workspace.provider.certificate)]
        tls.privateKey = .privateKey(workspace.provider.privateKey)
        let context = try NIOSSLContext(configuration: tls)
        let address = try SocketAddress(ipAddress: "127.0.0.1", port: port)
        let payload = ByteBuffer(string: loadPayload(size: self.plan.payloadSize))

        // Share of each connection: contiguous ranges of notification ids.
        let perConnection = self.plan.notifications / max(1, self.plan.connections)
        let remainder = self.plan.notifications % max(1, self.plan.connections)
        var ranges: [Range<Int>] = []
        var next = 0
        for index in 0..<self.plan.connections {
            let count = perConnection + (index < remainder ? 1 : 0)
            ranges.append(next..<(next + count))
            next += count
        }

        // Handshakes in waves of 64, so a thousand clients do not all time out together.
        var channels: [any Channel] = []
        var shares: [Int] = []
        channels.reserveCapacity(self.plan.connections)
        var start = 0
        while start < ranges.count {
            let wave = ranges[start..<min(start + 64, ranges.count)]
            try await withThrowingTaskGroup(of: (any Channel, Int).self) { group_ in
                for range in wave {
                    group_.addTask {
                        (
                            try await self.open(
                                range: range,
                                address: address,
                                context: context,
                                payload: payload,
                                group: group
                            ), range.count
                        )
                    }
                }
                for try await (channel, share) in group_ {
                    channels.append(channel)
                    shares.append(share)
                }
            }
            start += 64
        }
        self.channels = channels
        self.shares = shares
    }

    private func open(
        range: Range<Int>,
        address: SocketAddress,
        context: NIOSSLContext,
        payload: ByteBuffer,
        group: any EventLoopGroup
    ) async throws -> any Channel {
        let handshake = group.next().makePromise(of: Void.self)
        let channel = try await ClientBootstrap(group: handshake.futureResult.eventLoop)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connectTimeout(.seconds(30))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        NIOSSLClientHandler(context: context, serverHostname: "localhost")
                    )
                    try channel.pipeline.syncOperations.addHandler(
                        LoadConnectionHandler(
                            ids: range,
                            payload: payload,
                            distinctTokens: self.plan.distinctTokens,
                            tracker: self.tracker,
                            load: self,
                            handshake: handshake
                        )
                    )
                }
            }
            .connect(to: address)
            .get()
        try await handshake.futureResult.get()
        return channel
    }

    /// Starts sending on every connection: all at once as fast as each connection takes
    /// them, or paced. Paced, one timer per event loop ticks every millisecond and hands out
    /// the notifications due by then one at a time, round-robin over that loop's connections,
    /// so arrivals are spread evenly rather than in bursts of every connection at once.
    func start() {
        let started = ArrivalTracker.now
        guard let rate = self.plan.rate else {
            for channel in self.channels {
                channel.pipeline.fireUserInboundEventTriggered(LoadConnectionHandler.SendAll())
            }
            return
        }
        var byLoop: [ObjectIdentifier: (loop: any EventLoop, channels: [any Channel], shares: [Int], total: Int)] = [:]
        for (channel, share) in zip(self.channels, self.shares) {
            let key = ObjectIdentifier(channel.eventLoop)
            byLoop[key, default: (channel.eventLoop, [], [], 0)].channels.append(channel)
            byLoop[key]!.shares.append(share)
            byLoop[key]!.total += share
        }
        let total = max(1, self.shares.reduce(0, +))
        for (_, group) in byLoop {
            // One at a time, round-robin over the loop's connections that have some left
            // (shares differ by one at most).
            var remaining = group.shares
            var nextChannel = 0
            let pacer = Pacer(
                total: group.total,
                ratePerSecond: rate * Double(group.total) / Double(total),
                startedAt: started
            ) {
                while remaining[nextChannel] == 0 {
                    nextChannel = (nextChannel + 1) % group.channels.count
                }
                group.channels[nextChannel].pipeline.fireUserInboundEventTriggered(LoadConnectionHandler.Send(count: 1))
                remaining[nextChannel] -= 1
                nextChannel = (nextChannel + 1) % group.channels.count
            }
            pacer.start(on: group.loop)
        }
    }

    func closeAll() async {
        for channel in self.channels {
            try? await channel.close()
        }
    }
}

/// Sends one connection's notifications and counts what the bridge answers (error-responses
/// mean a failed notification: none are expected).
final class LoadConnectionHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// Write everything, as fast as the connection takes it.
    struct SendAll: Sendable {}
    /// Write `count` more (paced).
    struct Send: Sendable {
        var count: Int
    }

    private var next: Int
    private let end: Int
    private let payload: ByteBuffer
    private let distinctTokens: Int?
    private let tracker: ArrivalTracker
    private unowned let load: LegacyLoad
    private let handshake: EventLoopPromise<Void>
    /// How far writing may go now: `end` when sending everything, less when paced.
    private var limit: Int

    /// Frames built into one write at most.
    private static let batch = 32

    init(
        ids: Range<Int>,
        payload: ByteBuffer,
        distinctTokens: Int?,
        tracker: ArrivalTracker,
        load: LegacyLoad,
        handshake: EventLoopPromise<Void>
    ) {
        self.next = ids.lowerBound
        self.limit = ids.lowerBound
        self.end = ids.upperBound
        self.payload = payload
        self.distinctTokens = distinctTokens
        self.tracker = tracker
        self.load = load
        self.handshake = handshake
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? TLSUserEvent, case .handshakeCompleted = event {
            self.handshake.succeed()
        } else if event is SendAll {
            self.limit = self.end
            self.pump(context: context)
            return
        } else if let send = event as? Send {
            self.limit = min(self.end, self.limit + send.count)
            self.pump(context: context)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { self.pump(context: context) }
        context.fireChannelWritabilityChanged()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        while let packet = bytes.readErrorResponse() {
            _ = packet
            self.load.errorResponses.wrappingAdd(1, ordering: .relaxed)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.handshake.fail(ChannelError.ioOnClosedChannel)
        if self.next < self.end { self.load.closedEarly.wrappingAdd(1, ordering: .relaxed) }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.handshake.fail(error)
        context.close(promise: nil)
    }

    /// Writes what may be written now (up to `limit`) while the channel is writable.
    private func pump(context: ChannelHandlerContext) {
        var wrote = false
        while self.next < self.limit && context.channel.isWritable {
            let count = min(Self.batch, self.limit - self.next)
            var buffer = context.channel.allocator.buffer(capacity: count * (50 + self.payload.readableBytes))
            let now = ArrivalTracker.now
            for id in self.next..<(self.next + count) {
                self.write(id: id, into: &buffer)
                self.tracker.markSent(id, at: now)
            }
            self.next += count
            context.write(self.wrapOutboundOut(buffer), promise: nil)
            wrote = true
        }
        if wrote { context.flush() }
    }

    /// One command-2 frame: token, payload, identifier, expiration 0, priority 10.
    private func write(id: Int, into buffer: inout ByteBuffer) {
        let token = LoadToken.number(for: id, distinct: self.distinctTokens)
        let itemsLength = (3 + 32) + (3 + self.payload.readableBytes) + (3 + 4) + (3 + 4) + (3 + 1)
        buffer.writeInteger(UInt8(2))
        buffer.writeInteger(UInt32(itemsLength))
        buffer.writeInteger(UInt8(1))
        buffer.writeInteger(UInt16(32))
        buffer.writeInteger(token)
        buffer.writeRepeatingByte(0xAB, count: 24)
        buffer.writeInteger(UInt8(2))
        buffer.writeInteger(UInt16(self.payload.readableBytes))
        buffer.writeImmutableBuffer(self.payload)
        buffer.writeInteger(UInt8(3))
        buffer.writeInteger(UInt16(4))
        buffer.writeInteger(UInt32(truncatingIfNeeded: id))
        buffer.writeInteger(UInt8(4))
        buffer.writeInteger(UInt16(4))
        buffer.writeInteger(UInt32(0))
        buffer.writeInteger(UInt8(5))
        buffer.writeInteger(UInt16(1))
        buffer.writeInteger(UInt8(10))
    }
}

/// Hands out paced notifications on one event loop: a timer ticks every millisecond and calls
/// `handOut` once for each notification due by then (``LegacyLoad/start()``, and the client run's
/// ``ClientDriver/run(rate:group:)``).
final class Pacer: @unchecked Sendable {
    private let total: Int
    private let ratePerSecond: Double
    private let startedAt: UInt64
    // Touched on the pacer's event loop only.
    private let handOut: () -> Void
    private var handedOut = 0

    init(total: Int, ratePerSecond: Double, startedAt: UInt64, handOut: @escaping () -> Void) {
        self.total = total
        self.ratePerSecond = ratePerSecond
        self.startedAt = startedAt
        self.handOut = handOut
    }

    func start(on loop: any EventLoop) {
        loop.execute {
            loop.scheduleRepeatedTask(initialDelay: .zero, delay: .milliseconds(1)) { task in
                self.tick(task)
            }
        }
    }

    private func tick(_ task: RepeatedTask) {
        let elapsed = Double(ArrivalTracker.now - self.startedAt) / 1e9
        let due = min(self.total, Int(self.ratePerSecond * elapsed))
        while self.handedOut < due {
            self.handOut()
            self.handedOut += 1
        }
        if self.handedOut >= self.total { task.cancel() }
    }
}

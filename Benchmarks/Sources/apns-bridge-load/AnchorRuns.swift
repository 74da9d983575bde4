import ArgumentParser
import BridgeCore
import DevelopmentPKI
import Foundation
import Histogram
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization
import UpstreamAPNs

// MARK: client (the project's own upstream client, no legacy hop)

struct ClientRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client",
        abstract:
            "The project's APNsClient sends N notifications straight to the upstream (no legacy hop, no bridge process)."
    )

    @Option(help: "The upstream: mock or nghttpd.")
    var upstream: String = "nghttpd"

    @Option(help: "HTTP/2 connections (as the bridge's upstream.connectionsPerPool).")
    var upstreamConnections = 2

    @Option(help: "Notifications in all.")
    var notifications = 100_000

    @Option(help: "Requests in flight at once (the bridge has up to 256 per provider connection).")
    var window = 1_000

    @Option(help: "Payload bytes (JSON).")
    var payloadSize = 200

    @Option(
        help:
            "Notifications per second, paced (0: as fast as the window allows). With the mock upstream, the latency of one HTTP/2 hop at the rate a bridge run was given."
    )
    var rate: Double = 0

    @Option(help: "A label copied into the result.")
    var label = ""

    func run() async throws {
        guard let kind = UpstreamKind(rawValue: self.upstream) else {
            throw ValidationError("--upstream is mock or nghttpd")
        }
        guard self.rate >= 0 else { throw ValidationError("--rate ≥ 0") }
        guard self.notifications > 0, self.notifications <= 50_000_000, self.window > 0 else {
            throw ValidationError("--notifications 1…50,000,000, --window ≥ 1")
        }
        let workspace = try Workspace()
        defer { workspace.remove() }
        let tracker = ArrivalTracker(count: self.notifications)
        let upstream = try await RunningUpstream.start(
            kind,
            workspace: workspace,
            tracker: kind == .mock ? tracker : nil
        )
        var logger = Logger(label: "apns-bridge-load.client")
        logger.logLevel = .warning
        var configuration = APNsClient.Configuration()
        configuration.connectionsPerPool = self.upstreamConnections
        let signer = AuthenticationTokenSigner(
            key: workspace.signingKey,
            keyID: Workspace.keyID,
            teamID: Workspace.teamID
        )
        let client = try APNsClient(
            endpoint: APNsEndpoint(
                host: "127.0.0.1",
                port: upstream.port,
                serverHostname: "localhost",
                trustRoots: .certificates([workspace.pki.caCertificate])
            ),
            configuration: configuration,
            credentials: .token(AuthenticationTokenSource(signer: signer, logger: logger)),
            logger: logger
        )
        client.warmUp()
        let warmDeadline = ContinuousClock.now + .seconds(10)
        while client.usableConnectionCount < self.upstreamConnections, ContinuousClock.now < warmDeadline {
            try await Task.sleep(for: .milliseconds(10))
        }

        let driver = ClientDriver(
            client: client,
            total: self.notifications,
            payload: ByteBuffer(string: loadPayload(size: self.payloadSize)),
            distinctTokens: kind == .nghttpd ? nghttpdDistinctTokens : nil,
            tracker: tracker
        )
        let own = ProcessStats.current
        let cpuBefore = own.cpuSeconds
        let started = ArrivalTracker.now
        if self.rate > 0 {
            progress("sending \(self.notifications) notifications with APNsClient at \(Int(self.rate))/s…")
            try await driver.run(rate: self.rate, group: MultiThreadedEventLoopGroup.singleton)
        } else {
            progress("sending \(self.notifications) notifications with APNsClient, \(self.window) in flight…")
            try await driver.run(window: self.window, group: MultiThreadedEventLoopGroup.singleton)
        }
        let finished = ArrivalTracker.now
        let cpu = own.cpuSeconds - cpuBefore
        let seconds = Double(finished - started) / 1e9
        var fields: [String: any Sendable] = [
            "run": "client", "label": self.label, "upstream": kind.rawValue,
            "upstream_connections": self.upstreamConnections, "notifications": self.notifications,
            "window": self.window, "rate_target": self.rate, "payload_bytes": self.payloadSize, "seconds": seconds,
            "accepted": driver.accepted.load(ordering: .relaxed),
            "failed": driver.failed.load(ordering: .relaxed),
            "throughput": Double(driver.accepted.load(ordering: .relaxed)) / seconds,
            // With the mock upstream this process also runs the mock.
            "process_cpu_seconds": cpu, "process_cpu_us_per_notification": cpu * 1e6 / Double(self.notifications),
        ]
        if kind == .mock {
            try await Task.sleep(for: .milliseconds(300))
            let summary = tracker.summary()
            fields["lost"] = summary.lost
            fields["duplicated"] = summary.duplicated
            fields["p50_us"] = Int(summary.latency.valueAtPercentile(50))
            fields["p99_us"] = Int(summary.latency.valueAtPercentile(99))
            fields["p999_us"] = Int(summary.latency.valueAtPercentile(99.9))
        }
        client.shutdown()
        await upstream.stop()
        emit(fields)
    }
}

/// Keeps `window` requests in flight until `total` have an outcome.
final class ClientDriver: Sendable {
    let client: APNsClient
    let total: Int
    let payload: ByteBuffer
    let distinctTokens: Int?
    let tracker: ArrivalTracker
    let nextID = Atomic<Int>(0)
    let accepted = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    let done = Atomic<Int>(0)
    let ids = APNsIDGenerator()

    init(client: APNsClient, total: Int, payload: ByteBuffer, distinctTokens: Int?, tracker: ArrivalTracker) {
        self.client = client
        self.total = total
        self.payload = payload
        self.distinctTokens = distinctTokens
        self.tracker = tracker
    }

    /// As fast as `window` requests in flight allow: each answer sends the next.
    func run(window: Int, group: any EventLoopGroup) async throws {
        let finished = group.next().makePromise(of: Void.self)
        for _ in 0..<min(window, self.total) {
            self.sendNext(on: group.next(), finished: finished)
        }
        try await finished.futureResult.get()
    }

    /// Paced as the bridge runs pace their providers (``Pacer``): each event loop sends its share
    /// of the notifications due by each millisecond.
    func run(rate: Double, group: any EventLoopGroup) async throws {
        let finished = group.next().makePromise(of: Void.self)
        let loops = Array(group.makeIterator())
        let started = ArrivalTracker.now
        for (index, loop) in loops.enumerated() {
            let share = self.total / loops.count + (index < self.total % loops.count ? 1 : 0)
            let perSecond = rate * Double(share) / Double(self.total)
            Pacer(total: share, ratePerSecond: perSecond, startedAt: started) {
                self.sendNext(on: loop, finished: finished, continuing: false)
            }.start(on: loop)
        }
        try await finished.futureResult.get()
    }

    /// Sends one; when `continuing`, its answer sends the next.
    private func sendNext(on eventLoop: any EventLoop, finished: EventLoopPromise<Void>, continuing: Bool = true) {
        let id = self.nextID.wrappingAdd(1, ordering: .relaxed).oldValue
        guard id < self.total else { return }
        let token = LoadToken.hex(LoadToken.number(for: id, distinct: self.distinctTokens))
        let request = APNsRequest(
            path: "/3/device/" + token,
            topic: Workspace.topic,
            pushType: .alert,
            priority: 10,
            expiration: 0,
            apnsID: self.ids.next(),
            payload: self.payload
        )
        self.tracker.markSent(id, at: ArrivalTracker.now)
        self.client.send(request, on: eventLoop).whenComplete { result in
            if case .success(.answered(let response)) = result, response.status == 200 {
                self.accepted.wrappingAdd(1, ordering: .relaxed)
            } else {
                self.failed.wrappingAdd(1, ordering: .relaxed)
            }
            if self.done.wrappingAdd(1, ordering: .relaxed).newValue == self.total {
                finished.succeed()
            } else if continuing {
                self.sendNext(on: eventLoop, finished: finished)
            }
        }
    }
}

// MARK: h2load → nghttpd (the one-hop ceiling)

struct H2LoadRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "h2load",
        abstract: "h2load sends N APNs-shaped POSTs straight to nghttpd: the ceiling of one HTTP/2 TLS hop here."
    )

    @Option(help: "Client connections (-c).")
    var upstreamConnections = 2

    @Option(help: "Streams in flight per connection (-m).")
    var streams = 100

    @Option(help: "Requests in all (-n).")
    var notifications = 200_000

    @Option(help: "Payload bytes (JSON).")
    var payloadSize = 200

    @Option(help: "A label copied into the result.")
    var label = ""

    func run() async throws {
        guard self.notifications > 0, self.notifications <= 50_000_000 else {
            throw ValidationError("--notifications 1…50,000,000")
        }
        let h2load = try which("h2load")
        let workspace = try Workspace()
        defer { workspace.remove() }
        let upstream = try await RunningUpstream.start(.nghttpd, workspace: workspace, tracker: nil)
        let signer = AuthenticationTokenSigner(
            key: workspace.signingKey,
            keyID: Workspace.keyID,
            teamID: Workspace.teamID
        )
        let jwt = try signer.sign(issuedAt: Date())
        let bodyPath = workspace.directory + "/body.json"
        try loadPayload(size: self.payloadSize).write(toFile: bodyPath, atomically: true, encoding: .utf8)
        let urisPath = workspace.directory + "/uris.txt"
        let uris = (0..<nghttpdDistinctTokens).map {
            "https://127.0.0.1:\(upstream.port)/3/device/\(LoadToken.hex(UInt64($0)))"
        }
        try uris.joined(separator: "\n").appending("\n").write(toFile: urisPath, atomically: true, encoding: .utf8)

        let process = Process()
        process.executableURL = URL(fileURLWithPath: h2load)
        process.arguments = [
            "-n", "\(self.notifications)", "-c", "\(self.upstreamConnections)", "-m", "\(self.streams)", "-t", "1",
            "-d", bodyPath, "-i", urisPath,
            "-H", "authorization: bearer \(jwt)",
            "-H", "apns-id: 2d2a3b36-1c5e-4d6f-8a01-23456789abcd",
            "-H", "apns-collapse-id: 2d2a3b36-1c5e-4d6f-8a01-23456789abcd",
            "-H", "apns-expiration: 0",
            "-H", "apns-priority: 10",
            "-H", "apns-topic: \(Workspace.topic)",
            "-H", "apns-push-type: alert",
        ]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        progress("h2load -n \(self.notifications) -c \(self.upstreamConnections) -m \(self.streams) → nghttpd…")
        let childrenCPUBefore = endedChildrenCPUSeconds()
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        while process.isRunning { try await Task.sleep(for: .milliseconds(5)) }
        // h2load is the only child that ended in between (nghttpd stops below).
        let h2loadCPU = endedChildrenCPUSeconds() - childrenCPUBefore
        await upstream.stop()
        let text = String(decoding: data, as: UTF8.self)
        // "finished in 1.23s, 98765.43 req/s, ..." and "status codes: N 2xx, ..."
        guard let finishedLine = text.split(separator: "\n").first(where: { $0.hasPrefix("finished in") }),
            let rateText = finishedLine.split(separator: ",").dropFirst().first?.split(separator: " ").first,
            let rate = Double(rateText)
        else {
            throw LoadToolError("could not read h2load's output:\n\(text)")
        }
        let status2xx =
            text.split(separator: "\n").first(where: { $0.hasPrefix("status codes:") })
            .flatMap { $0.split(separator: " ").dropFirst(2).first }.flatMap { Int($0) } ?? 0
        emit([
            "run": "h2load", "label": self.label, "upstream": "nghttpd",
            "upstream_connections": self.upstreamConnections, "streams": self.streams,
            "notifications": self.notifications, "payload_bytes": self.payloadSize,
            "throughput": rate, "status_2xx": status2xx,
            // The client's own CPU per request: what one request's upstream half (TLS, HPACK, a
            // stream) costs an nghttp2 client, to set the bridge's CPU per notification against.
            "h2load_cpu_seconds": h2loadCPU,
            "h2load_cpu_us_per_request": status2xx > 0 ? h2loadCPU * 1e6 / Double(status2xx) : 0,
        ])
    }
}

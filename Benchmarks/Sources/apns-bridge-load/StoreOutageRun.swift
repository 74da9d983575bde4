import ArgumentParser
import BridgeTestSupport
import Crypto
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import Logging
import MockAPNs
import NIOCore
import Synchronization

/// PostgreSQL goes away under load and comes back (docs/operations.md#store-outage), as an
/// operator meets it in a minor-version upgrade or a crash: one or two `serve` processes on one
/// PostgreSQL of the run's own, each with a legacy provider that writes at a steady rate and
/// follows the binary interface's resend discipline (after an error-response it reconnects and
/// sends again every notification after the one named). With two instances each reconnect
/// goes to the other one, as behind a round-robin balancer, so resends meet records another
/// instance wrote. About 5 % of the tokens are answered
/// 410, and now and then one is a bad token, so resend records are live. The server is stopped
/// (`pg_ctl stop -m fast`) or killed (SIGKILL to the postmaster) partway, stays down a while,
/// and is started again on the same data.
///
/// A cron job polls the first instance's feedback port every second all through the traffic,
/// the outage included, and again after it until the list is empty.
///
/// Each run reports what the providers meant to send against what MockAPNs received (lost,
/// delivered twice), the error-responses other than the bad tokens' status 8, what was still in
/// flight after the traffic, whether `/healthz` showed the outage, and whether every 410 reached
/// the feedback polls exactly once.
struct StoreOutageRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store-outage",
        abstract:
            "PostgreSQL stopped or killed under resending providers, then started again: lost, duplicated, fed back."
    )

    enum Cut: String, ExpressibleByArgument, CaseIterable {
        case fast
        case kill
    }

    @OptionGroup var bridgeOptions: BridgeOptions

    @Option(help: "serve processes on the one PostgreSQL (1 or 2), each with a provider of its own.")
    var instances = 1

    @Option(help: "How PostgreSQL goes away: fast (pg_ctl stop -m fast) or kill (SIGKILL to the postmaster).")
    var cut: Cut = .fast

    @Option(help: "Runs, each on a new PostgreSQL cluster.")
    var runs = 5

    @Option(help: "Notifications per second per provider.")
    var rate = 150

    @Option(help: "Seconds each provider writes.")
    var seconds = 15

    @Option(help: "Seconds into the traffic when PostgreSQL goes away.")
    var cutAfter = 6.0

    @Option(help: "Seconds PostgreSQL stays away.")
    var down = 5.0

    @Option(
        help:
            "With two instances: alternate (each reconnect goes to the other instance, as behind a round-robin balancer) or same."
    )
    var reconnect: Reconnect = .alternate

    enum Reconnect: String, ExpressibleByArgument, CaseIterable {
        case alternate
        case same
    }

    @Option(help: "A label copied into each result.")
    var label = ""

    func run() async throws {
        guard (1...2).contains(self.instances), self.runs > 0, (1...2_000).contains(self.rate),
            (1...600).contains(self.seconds), self.cutAfter >= 0, self.down >= 0
        else {
            throw ValidationError("--instances 1 or 2, --runs ≥ 1, --rate 1…2,000, --seconds 1…600")
        }
        guard PostgresCluster.binaries != nil else {
            throw LoadToolError("PostgreSQL's server programs are needed (Debian: postgresql)")
        }
        let workspace = try Workspace()
        defer { workspace.remove() }
        let answers = AnswerTimes()
        let mock = try await Self.startMock(workspace, answers: answers)
        defer { Task { await mock.close() } }

        for run in 0..<self.runs {
            progress("run \(run + 1) of \(self.runs): \(self.instances) instance(s), \(self.cut.rawValue) stop")
            let result = try await self.once(run: run, mock: mock, answers: answers, workspace: workspace)
            emit(result)
        }
    }

    static func startMock(_ workspace: Workspace, answers: AnswerTimes) async throws -> MockAPNsServer {
        var configuration = MockAPNsConfiguration(
            certificateChain: [workspace.pki.server.certificate],
            privateKey: workspace.pki.server.privateKey
        )
        configuration.port = 0
        configuration.signingKeys = [
            .init(keyID: Workspace.keyID, teamID: Workspace.teamID, publicKey: workspace.signingKey.publicKey)
        ]
        configuration.topics = [Workspace.topic]
        configuration.onAnswer = { record in answers.record(record.token) }
        var logger = Logger(label: "mock-apns")
        logger.logLevel = .warning
        return try await MockAPNsServer.start(configuration: configuration, logger: logger)
    }

    /// One run: a new cluster, new bridges, a provider each, the cut, the checks.
    func once(
        run: Int,
        mock: MockAPNsServer,
        answers: AnswerTimes,
        workspace: Workspace
    ) async throws -> [String: any Sendable] {
        mock.ledger.reset()
        answers.reset()
        let plans = (0..<self.instances).map {
            ProviderPlan(run: run, provider: $0, count: self.rate * self.seconds, mock: mock)
        }
        let cluster = try await PostgresCluster.start()
        var bridges: [BridgeChild] = []
        do {
            for _ in 0..<self.instances {
                bridges.append(
                    try await self.bridgeOptions.startBridge(
                        workspace: workspace,
                        upstreamPort: mock.port,
                        store: cluster.url
                    )
                )
            }
            let result = try await self.traffic(
                plans: plans,
                bridges: bridges,
                cluster: cluster,
                mock: mock,
                answers: answers,
                workspace: workspace
            )
            for bridge in bridges { bridge.stop() }
            await cluster.remove()
            return result
        } catch {
            for bridge in bridges { bridge.stop() }
            await cluster.remove()
            throw error
        }
    }

    func traffic(
        plans: [ProviderPlan],
        bridges: [BridgeChild],
        cluster: PostgresCluster,
        mock: MockAPNsServer,
        answers: AnswerTimes,
        workspace: Workspace
    ) async throws -> [String: any Sendable] {
        let started = ContinuousClock.now
        var cutAt = started
        let (cut, cutAfter, down, rate) = (self.cut, self.cutAfter, self.down, self.rate)
        let adminPort = bridges[0].adminPort
        var providers: [ProviderOutcome] = []
        var healthz503 = false
        var restartedAt = started
        var served: [String: Int] = [:]
        var pollsDuringTraffic = 0
        var pollsFailedDuringTraffic = 0
        let feedbackAddress = try SocketAddress(ipAddress: "127.0.0.1", port: bridges[0].feedbackPort)
        let trafficSeconds = self.seconds
        try await withThrowingTaskGroup(of: TaskResult.self) { group in
            // The cron job, every second while the providers write: polls that meet the outage
            // are closed with what they got (docs/operations.md#store-outage).
            group.addTask {
                var served: [String: Int] = [:]
                var (polls, failed) = (0, 0)
                while ContinuousClock.now < started + .seconds(trafficSeconds) {
                    do {
                        let poll = try await FeedbackPoller.poll(
                            feedbackAddress,
                            identity: workspace.provider,
                            trusting: workspace.pki.caCertificate,
                            timeout: .seconds(30)
                        )
                        for tuple in poll.tuples {
                            served[tuple.deviceToken.hexDump(format: .compact), default: 0] += 1
                        }
                        polls += 1
                    } catch {
                        failed += 1
                    }
                    try await Task.sleep(for: .seconds(1))
                }
                return .polls(served: served, polls: polls, failed: failed)
            }
            group.addTask {
                try await Task.sleep(until: started + .seconds(cutAfter))
                switch cut {
                case .fast: try await cluster.stopFast()
                case .kill: try cluster.kill()
                }
                var seen503 = false
                let back = ContinuousClock.now + .seconds(down)
                while ContinuousClock.now < back {
                    if let (status, _) = try? await httpGet(port: adminPort, path: "/healthz"), status == 503 {
                        seen503 = true
                    }
                    try await Task.sleep(for: .milliseconds(250))
                }
                try await cluster.startServer()
                return .outage(healthz503: seen503, cutAt: back - .seconds(down), restartedAt: .now)
            }
            let ports = bridges.map(\.gatewayPort)
            for (index, plan) in plans.enumerated() {
                // Provider i starts on instance i; alternating, its next connection goes to the next.
                let order = self.reconnect == .alternate ? Array(ports[index...] + ports[..<index]) : [ports[index]]
                let provider = ResendingProvider(plan: plan, rate: rate, ports: order, workspace: workspace)
                group.addTask { .provider(try await provider.run()) }
            }
            for try await result in group {
                switch result {
                case .provider(let outcome): providers.append(outcome)
                case .outage(let seen503, let cut, let restarted):
                    (healthz503, cutAt, restartedAt) = (seen503, cut, restarted)
                case .polls(let polled, let polls, let failed):
                    served.merge(polled, uniquingKeysWith: +)
                    (pollsDuringTraffic, pollsFailedDuringTraffic) = (polls, failed)
                }
            }
        }
        let trafficEnded = ContinuousClock.now

        // What the bridges still hold once the providers are done, and how long until they
        // hold nothing (150 s at most: longer than the resend window).
        func inFlight() async -> Int {
            var total = 0.0
            for bridge in bridges {
                total += (try? await bridge.metric("apns_bridge_notifications_in_flight")) ?? 1_000_000
            }
            return Int(total)
        }
        let inFlightAfter = await inFlight()
        var inFlightClearedAfter: Double? = 0
        if inFlightAfter > 0 {
            inFlightClearedAfter = nil
            while ContinuousClock.now < trafficEnded + .seconds(150) {
                try await Task.sleep(for: .milliseconds(250))
                if await inFlight() == 0 {
                    inFlightClearedAfter = (ContinuousClock.now - trafficEnded) / .seconds(1)
                    break
                }
            }
        }

        // What the mock received, per token.
        var received: [String: (count: Int, status: Int)] = [:]
        for record in mock.ledger.records {
            received[record.token, default: (0, record.status)].count += 1
        }
        var intended = 0
        var lost = 0
        var duplicated = 0
        var unregistered: Set<String> = []
        var duplicates: [String] = []
        for plan in plans {
            for index in 0..<plan.count where !plan.isBad(index) {
                intended += 1
                let hex = plan.hex(index)
                let count = received[hex]?.count ?? 0
                if count == 0 { lost += 1 }
                if count > 1 {
                    duplicated += 1
                    // When each copy was answered, in seconds from the start of the traffic.
                    let times = answers.times(hex).map { String(format: "%.2f", ($0 - started) / .seconds(1)) }
                    duplicates.append("\(plan.provider)/\(index)@\(times.joined(separator: ","))")
                }
                if plan.isUnregistered(index), count > 0 { unregistered.insert(hex) }
            }
        }

        // The feedback list after the traffic: polled until every 410 is served (or 60 s), then
        // once more.
        let servedDuringTraffic = served.count
        let feedbackDeadline = ContinuousClock.now + .seconds(60)
        while true {
            let poll = try await FeedbackPoller.poll(
                feedbackAddress,
                identity: workspace.provider,
                trusting: workspace.pki.caCertificate,
                timeout: .seconds(30)
            )
            for tuple in poll.tuples { served[tuple.deviceToken.hexDump(format: .compact), default: 0] += 1 }
            let done = unregistered.isSubset(of: served.keys)
            if (done && poll.tupleCount == 0) || ContinuousClock.now > feedbackDeadline { break }
            if poll.tupleCount == 0 { try await Task.sleep(for: .milliseconds(500)) }
        }

        let finishSeconds = providers.map(\.finishSeconds).max() ?? 0
        if lost + duplicated > 0 || inFlightAfter != 0 || unregistered.subtracting(served.keys).count > 0 {
            progress(
                "cut at \(String(format: "%.2f", (cutAt - started) / .seconds(1))) s, back at \(String(format: "%.2f", (restartedAt - started) / .seconds(1))) s; delivered twice (provider/index@answers): \(duplicates.prefix(30).joined(separator: " "))"
            )
            // The workspace goes at the end: the logs of a run that went wrong are kept.
            for (index, bridge) in bridges.enumerated() {
                let kept = FileManager.default.temporaryDirectory
                    .appendingPathComponent("apns-bridge-store-outage-\(UUID().uuidString.prefix(8))-\(index).log").path
                try? FileManager.default.copyItem(atPath: bridge.logPath, toPath: kept)
                progress("bridge \(index)'s log: \(kept)")
            }
        }
        let otherStatuses = providers.flatMap(\.otherStatuses).map(String.init).joined(separator: " ")
        return [
            "run": "store-outage", "label": self.label, "instances": self.instances, "cut": self.cut.rawValue,
            "reconnect": self.instances > 1 ? self.reconnect.rawValue : "same",
            "rate_per_provider": self.rate, "seconds": self.seconds, "down_seconds": self.down,
            "intended": intended, "lost": lost, "duplicated": duplicated,
            "error_responses_other_than_8": otherStatuses,
            "closed_without_packet": providers.map(\.closedWithoutPacket).reduce(0, +),
            "reconnects": providers.map(\.reconnects).reduce(0, +),
            "in_flight_after": inFlightAfter,
            "in_flight_cleared_after_seconds": inFlightClearedAfter,
            "healthz_503_seen": healthz503,
            "unregistered_answered": unregistered.count,
            "feedback_polls_during_traffic": pollsDuringTraffic,
            "feedback_polls_failed_during_traffic": pollsFailedDuringTraffic,
            "feedback_served_during_traffic": servedDuringTraffic,
            "feedback_missing": unregistered.subtracting(served.keys).count,
            "feedback_twice": served.values.filter { $0 > 1 }.count,
            "feedback_unexpected": Set(served.keys).subtracting(unregistered).count,
            "slowest_finish_seconds": finishSeconds,
            "traffic_end_after_restart_seconds": (trafficEnded - restartedAt) / .seconds(1),
            "settings": self.bridgeOptions.settings.joined(separator: " "),
        ]
    }
}

/// One provider's notifications in one run: distinct tokens (run, provider, index in the
/// first 8 bytes), about 5 % of them answered 410 by the mock and one in 250 a bad token.
struct ProviderPlan: Sendable {
    let run: Int
    let provider: Int
    let count: Int

    init(run: Int, provider: Int, count: Int, mock: MockAPNsServer) {
        self.run = run
        self.provider = provider
        self.count = count
        for index in 0..<count {
            if self.isUnregistered(index) {
                mock.script.unregister(token: self.hex(index), atMilliseconds: 1_767_225_600_000)
            } else if self.isBad(index) {
                mock.script.rejectAsBadToken(self.hex(index))
            }
        }
    }

    func isUnregistered(_ index: Int) -> Bool { index % 20 == 7 }
    func isBad(_ index: Int) -> Bool { index % 250 == 100 }

    func token(_ index: Int) -> ByteBuffer {
        var token = ByteBuffer()
        token.writeInteger(UInt64(self.run) << 40 | UInt64(self.provider) << 32 | UInt64(index))
        token.writeRepeatingByte(0xAB, count: 24)
        return token
    }

    func hex(_ index: Int) -> String { self.token(index).hexDump(format: .compact) }

    /// The frame of notification `index`; its identifier is `index + 1`.
    func frame(_ index: Int) -> ByteBuffer {
        FrameBuilder.frame(
            .itemized,
            identifier: UInt32(index + 1),
            expiration: UInt32(Date().timeIntervalSince1970) + 86_400,
            priority: 10,
            token: self.token(index),
            payload: FrameBuilder.payload(#"{"aps":{"alert":"outage \#(index)"}}"#)
        )
    }
}

/// When the mock answered each token (for a run's diagnostics).
final class AnswerTimes: Sendable {
    private let answers = Mutex<[String: [ContinuousClock.Instant]]>([:])

    func record(_ token: String) {
        let now = ContinuousClock.now
        self.answers.withLock { $0[token, default: []].append(now) }
    }

    func times(_ token: String) -> [ContinuousClock.Instant] { self.answers.withLock { $0[token] ?? [] } }

    func reset() { self.answers.withLock { $0 = [:] } }
}

enum TaskResult: Sendable {
    case provider(ProviderOutcome)
    case outage(healthz503: Bool, cutAt: ContinuousClock.Instant, restartedAt: ContinuousClock.Instant)
    /// The cron job's polls during the traffic: the tokens served, the polls that ended
    /// normally and those that failed.
    case polls(served: [String: Int], polls: Int, failed: Int)
}

struct ProviderOutcome: Sendable {
    /// Statuses of error-responses other than 8 (each names a notification the provider's
    /// discipline gives up).
    var otherStatuses: [UInt8] = []
    var closedWithoutPacket = 0
    var reconnects = 0
    /// From the provider's last frame to the bridge's clean close of its last connection.
    var finishSeconds = 0.0
}

/// A legacy provider with the binary interface's resend discipline: writes its plan at a steady
/// rate; when the bridge closes a connection, reads the error-response, reconnects, and sends
/// again every notification after the one it names (the named one is given up: a bad token, or
/// whatever its status says). At the end it closes its output and waits for the bridge to close,
/// which it does once every notification has its outcome.
struct ResendingProvider: Sendable {
    let plan: ProviderPlan
    let rate: Int
    /// The gateways it connects to, in turn (one: always the same).
    let ports: [Int]
    let workspace: Workspace

    func connect(_ attempt: Int) async throws -> LegacyConnection {
        try await LegacyConnection.connect(
            to: try SocketAddress(ipAddress: "127.0.0.1", port: self.ports[attempt % self.ports.count]),
            identity: self.workspace.provider,
            trusting: self.workspace.pki.caCertificate
        )
    }

    func run() async throws -> ProviderOutcome {
        var outcome = ProviderOutcome()
        let started = ContinuousClock.now
        let interval = Duration.seconds(1) / self.rate
        var connection = try await self.connect(0)
        var firstOnConnection = 0
        var next = 0
        while true {
            if next < self.plan.count {
                let due = started + interval * next
                if due > .now { try await Task.sleep(until: due) }
                if connection.isActive, (try? await connection.send(self.plan.frame(next))) != nil {
                    next += 1
                    continue
                }
            }
            // The bridge closed (or all is written: close our side and wait for its close).
            let finishing = next >= self.plan.count
            let finishStarted = ContinuousClock.now
            if finishing { try? await connection.closeOutput() }
            var answer = (try? await connection.bytesUntilClose(timeout: .seconds(300))) ?? ByteBuffer()
            await connection.close()
            if let packet = answer.readErrorResponse() {
                if packet.status != .invalidToken { outcome.otherStatuses.append(packet.status.rawValue) }
                next = Int(packet.identifier.rawValue)  // the one after the named (identifiers are index + 1)
            } else if finishing {
                outcome.finishSeconds = (ContinuousClock.now - finishStarted) / .seconds(1)
                return outcome
            } else {
                // Closed with no word: a client can only send the connection's notifications again.
                outcome.closedWithoutPacket += 1
                next = firstOnConnection
            }
            outcome.reconnects += 1
            connection = try await self.connect(outcome.reconnects)
            firstOnConnection = next
        }
    }
}

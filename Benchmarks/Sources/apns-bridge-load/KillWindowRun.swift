import ArgumentParser
import BridgeStores
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

/// How soon after APNs answers 410 the feedback entry survives `kill -9`: for each
/// delay, a provider sends a batch whose every token APNs reports unregistered; the bridge is
/// killed that long after the mock wrote its last answer; the SQLite file is then opened and
/// the entries counted.
struct KillWindowRun: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kill-window",
        abstract: "410s answered, then kill -9 after a delay: how many feedback entries survive."
    )

    @OptionGroup var bridgeOptions: BridgeOptions

    @Option(help: "Delays after the last 410 answer, in milliseconds, comma-separated.")
    var delays = "0,1,2,5,10,20"

    @Option(help: "Runs per delay.")
    var runs = 10

    @Option(help: "Notifications (all answered 410) per run.")
    var tokens = 50

    @Option(help: "A label copied into each result.")
    var label = ""

    func run() async throws {
        let delays = self.delays.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !delays.isEmpty, self.runs > 0, (1...10_000).contains(self.tokens) else {
            throw ValidationError("--delays a,b,… in ms, --runs ≥ 1, --tokens 1…10,000")
        }
        let workspace = try Workspace()
        defer { workspace.remove() }
        var configuration = MockAPNsConfiguration(
            certificateChain: [workspace.pki.server.certificate],
            privateKey: workspace.pki.server.privateKey
        )
        configuration.port = 0
        configuration.recordsRequests = false
        configuration.signingKeys = [
            .init(keyID: Workspace.keyID, teamID: Workspace.teamID, publicKey: workspace.signingKey.publicKey)
        ]
        configuration.topics = [Workspace.topic]
        let answers = Mutex((count: 0, last: ContinuousClock.now))
        configuration.onAnswer = { _ in answers.withLock { $0 = ($0.count + 1, ContinuousClock.now) } }
        var logger = Logger(label: "mock-apns")
        logger.logLevel = .warning
        let mock = try await MockAPNsServer.start(configuration: configuration, logger: logger)
        defer { Task { await mock.close() } }
        mock.script.unregisterEveryToken(atMilliseconds: 1_767_225_600_000)

        var seed = 0
        for delay in delays {
            var missing = 0
            var runsWithLoss = 0
            for run in 0..<self.runs {
                let path = "\(workspace.directory)/kill-\(delay)-\(run).sqlite"
                let bridge = try await self.bridgeOptions.startBridge(
                    workspace: workspace,
                    upstreamPort: mock.port,
                    store: "sqlite:\(path)"
                )
                let before = answers.withLock { $0.count }
                let provider = try await LegacyConnection.connect(
                    to: try SocketAddress(ipAddress: "127.0.0.1", port: bridge.gatewayPort),
                    identity: workspace.provider,
                    trusting: workspace.pki.caCertificate
                )
                var frames = ByteBuffer()
                for _ in 0..<self.tokens {
                    seed += 1
                    frames.writeImmutableBuffer(
                        FrameBuilder.frame(
                            .itemized,
                            identifier: UInt32(seed),
                            token: FrameBuilder.token(seed),
                            payload: FrameBuilder.payload()
                        )
                    )
                }
                try await provider.send(frames)
                let deadline = ContinuousClock.now + .seconds(30)
                while answers.withLock({ $0.count }) < before + self.tokens, ContinuousClock.now < deadline {
                    await Task.yield()
                }
                let last = answers.withLock { $0.last }
                // Spin: sleeps overshoot by more than the delays measured.
                while ContinuousClock.now < last + .milliseconds(delay) {}
                bridge.kill()
                await provider.close()
                let store = try await SQLiteBridgeStore.open(
                    path: path,
                    logger: Logger(label: "kill-window"),
                    backgroundWork: StoreKind.inTasksOfTheirOwn
                )
                let stored = try await store.pendingCount()
                await store.close()
                missing += self.tokens - stored
                if stored < self.tokens { runsWithLoss += 1 }
            }
            emit([
                "run": "kill-window", "label": self.label, "delay_ms": delay, "runs": self.runs,
                "tokens_per_run": self.tokens,
                "missing": missing, "runs_with_loss": runsWithLoss,
                "settings": self.bridgeOptions.settings.joined(separator: " "),
            ])
        }
    }
}

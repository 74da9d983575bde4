import ArgumentParser
import BridgeApp
import Foundation

/// The options `serve` and `check-config` share. Each flag sets one configuration key (or a
/// few); flags win over `APNS_BRIDGE_*` environment variables, which win over the file.
struct BridgeOptions: ParsableArguments {
    @Option(
        help:
            "YAML configuration file (default: $APNS_BRIDGE_CONFIG, else none). docs/configuration.md lists every key."
    )
    var config: String?

    @Option(
        name: .customLong("set"),
        help: ArgumentHelp(
            "Sets any configuration key, e.g. --set gateway.maximumConnections=5000 (repeatable).",
            valueName: "KEY=VALUE"
        )
    )
    var assignments: [String] = []

    @Option(help: "gateway.listen: HOST:PORT of the legacy gateway (port 0 picks a free port).")
    var gateway: String?

    @Option(help: "feedback.listen: HOST:PORT of the feedback service.")
    var feedback: String?

    @Option(help: "admin.listen: HOST:PORT of /metrics, /healthz, /readyz, /push-log, or off.")
    var admin: String?

    @Option(help: "tls.certificate: PEM certificate (chain) the legacy ports present.")
    var certificate: String?

    @Option(name: .customLong("private-key"), help: "tls.privateKey: PEM private key of --certificate.")
    var privateKey: String?

    @Option(
        name: .customLong("client-ca"),
        help: "tls.clientCA: PEM bundle(s) of the CA(s) provider certificates chain to (comma-separated)."
    )
    var clientCA: String?

    @Option(help: "environment: the default APNs environment, sandbox or production.")
    var environment: String?

    @Option(help: "store.url: sqlite:PATH or postgres://user:password@host:port/database.")
    var store: String?

    @Option(
        name: .customLong("signing-key"),
        help: "KEYID:TEAMID:PATH of a .p8 signing key: the credentials named `default`."
    )
    var signingKey: String?

    @Option(help: "upstream.production and upstream.sandbox: send to this HOST:PORT instead of Apple's hosts.")
    var upstream: String?

    @Option(name: .customLong("upstream-ca"), help: "upstream.ca: PEM CA certificate(s) to trust for --upstream.")
    var upstreamCA: String?

    @Option(name: .customLong("upstream-server-name"), help: "upstream.serverName: TLS server name of --upstream.")
    var upstreamServerName: String?

    @Flag(
        name: .customLong("feedback-only-32-byte-tokens"),
        help: "feedback.only32ByteTokens: leave tokens that are not 32 bytes out of feedback lists."
    )
    var only32ByteTokens = false

    @Option(
        name: .customLong("feedback-retention-days"),
        help: "feedback.retentionDays: entries not polled within this many days are removed."
    )
    var feedbackRetentionDays: String?

    @Option(
        name: .customLong("resend-window-seconds"),
        help: "store.resendWindowSeconds: how long a resend record is kept."
    )
    var resendWindowSeconds: String?

    @Option(name: .customLong("log-level"), help: "log.level: trace, debug, info, notice, warning, error or critical.")
    var logLevel: String?

    @Option(
        name: .customLong("log-format"),
        help: "log.format: text (default) or json (one JSON object per line, for log shippers)."
    )
    var logFormat: String?

    /// The flags as configuration keys.
    func flagValues() throws -> [String: String] {
        var values: [String: String] = [:]
        for assignment in self.assignments {
            guard let equals = assignment.firstIndex(of: "="), equals != assignment.startIndex else {
                throw ValidationError("--set \(assignment): expected KEY=VALUE")
            }
            values[String(assignment[..<equals])] = String(assignment[assignment.index(after: equals)...])
        }
        let simple: [(String, String?)] = [
            ("gateway.listen", self.gateway), ("feedback.listen", self.feedback), ("admin.listen", self.admin),
            ("tls.certificate", self.certificate), ("tls.privateKey", self.privateKey), ("tls.clientCA", self.clientCA),
            ("environment", self.environment), ("store.url", self.store),
            ("upstream.production", self.upstream), ("upstream.sandbox", self.upstream),
            ("upstream.ca", self.upstreamCA), ("upstream.serverName", self.upstreamServerName),
            ("feedback.retentionDays", self.feedbackRetentionDays),
            ("store.resendWindowSeconds", self.resendWindowSeconds),
            ("log.level", self.logLevel), ("log.format", self.logFormat),
        ]
        for (key, value) in simple {
            if let value { values[key] = value }
        }
        if self.only32ByteTokens { values["feedback.only32ByteTokens"] = "true" }
        if let signingKey {
            let parts = signingKey.split(separator: ":", maxSplits: 2).map(String.init)
            guard parts.count == 3 else {
                throw ValidationError("--signing-key \(signingKey): expected KEYID:TEAMID:PATH")
            }
            values["credentials"] = values["credentials"] ?? "default"
            values["credential.default.keyId"] = parts[0]
            values["credential.default.teamId"] = parts[1]
            values["credential.default.keyFile"] = parts[2]
        }
        return values
    }

    /// Where the settings come from: these flags, the process environment, the file.
    func settingsSource() throws -> SettingsSource {
        let environment = ProcessInfo.processInfo.environment
        return SettingsSource(
            flags: try self.flagValues(),
            environment: environment,
            file: self.config ?? environment["APNS_BRIDGE_CONFIG"]
        )
    }

    /// Reads and checks the configuration; on an error, prints it (naming the key) and exits 78.
    func loadSettings() async throws -> BridgeSettings {
        try await self.loadSettingsWithSetValues().settings
    }

    /// The settings, and the keys that were set with their values (secrets not shown).
    func loadSettingsWithSetValues() async throws -> (settings: BridgeSettings, set: [(key: String, value: String)]) {
        do {
            return try await self.settingsSource().loadWithSetValues()
        } catch let error as ConfigurationError {
            FileHandle.standardError.write(Data("apns-bridge: \(error)\n".utf8))
            throw ExitCode(78)  // EX_CONFIG
        }
    }
}

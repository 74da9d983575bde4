import ArgumentParser
import BridgeApp

@main
struct APNsBridgeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns-bridge",
        abstract: "Lets software written for Apple's retired binary APNs interface keep working, over HTTP/2.",
        discussion: """
            The legacy gateway speaks the binary provider interface (commands 0, 1 and 2, the \
            error-response packet); each notification goes to APNs over HTTP/2 with a provider \
            token or a certificate; 410 answers feed the feedback service. Start with `demo`; run \
            with `serve`; check a configuration with `check-config`; `send` and `feedback` are a \
            legacy provider and a feedback poller for smoke tests; `healthcheck` asks a running bridge \
            whether it is ready; `reload` makes it read its configuration again; `log` says what APNs \
            answered each notification; `report` prints the migration report; `channels` manages the \
            Live Activity channels that legacy frames reach through channel tokens.
            """,
        version: BridgeVersion.description,
        subcommands: [
            ServeCommand.self, DemoCommand.self, MockAPNsCommand.self, SendCommand.self, FeedbackCommand.self,
            CheckConfigCommand.self,
            HealthcheckCommand.self, ReloadCommand.self, LogCommand.self, ChannelsCommand.self, ReportCommand.self,
        ]
    )
}

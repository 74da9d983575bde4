import ArgumentParser

@main
struct APNsBridgeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns-bridge",
        abstract: "Lets software written for Apple's retired binary APNs interface keep working, over HTTP/2.",
        discussion: """
            The legacy gateway speaks the binary provider interface (commands 0, 1 and 2, the \
            error-response packet); each notification goes to APNs over HTTP/2 with a provider \
            token or a certificate; 410 answers feed the feedback service. `send`, `feedback` and \
            `check-config` arrive with the product issue.
            """,
        version: "0.3.0",
        subcommands: [ServeCommand.self, DemoCommand.self, MockAPNsCommand.self]
    )
}

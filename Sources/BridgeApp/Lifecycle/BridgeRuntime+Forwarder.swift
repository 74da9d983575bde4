import BridgeCore
import BridgeForwarding
import Logging
import UpstreamAPNs

extension BridgeRuntime {
    /// One upstream client per credential, behind the reloadable forwarder the gateway sends
    /// through; `makeClient` makes a reload's new ones. A client opens no connection before
    /// its first request (or ``UpstreamService``'s warm-up).
    static func makeForwarder(
        _ settings: BridgeSettings,
        credentials credentialSet: [String: APNsCredentials],
        pushLog: PushLog?,
        logger: Logger
    ) throws -> (
        reloadable: ReloadableForwarder,
        makeClient: @Sendable (String, APNsCredentials) throws -> APNsForwarder
    ) {
        let makeClient: @Sendable (String, APNsCredentials) throws -> APNsForwarder = { name, credentials in
            var clientLogger = logger
            clientLogger[metadataKey: "credentials"] = "\(name)"
            return try APNsForwarder(
                configuration: settings.upstream,
                credentials: credentials,
                logger: clientLogger,
                pushLog: pushLog
            )
        }
        var clients: [String: APNsForwarder] = [:]
        for (name, credentials) in credentialSet {
            clients[name] = try makeClient(name, credentials)
        }
        logger.info(
            "upstream HTTP/2 engine",
            metadata: ["engine": "\(settings.upstream.client.engine)", "available": "\(BridgeVersion.engines)"]
        )
        return (ReloadableForwarder(clients: clients, defaultCredentials: settings.defaultCredentials), makeClient)
    }
}

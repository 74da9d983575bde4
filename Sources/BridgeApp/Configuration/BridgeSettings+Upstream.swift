import BridgeCore
import BridgeForwarding
import NIOSSL
import UpstreamAPNs

/// Where and how the bridge reaches APNs: the hosts of each environment (device, broadcast and
/// channel management APIs), their trust, and the HTTP/2 client's limits and timeouts.
extension BridgeSettings {
    static func readUpstream(
        _ settings: SettingsReader
    ) throws -> (APNsForwarder.Configuration, [APNsEnvironment: APNsEndpoint]) {
        var upstream = APNsForwarder.Configuration()
        let trustRoots: NIOSSLTrustRoots? = try settings.file(.upstreamCA).map { path in
            do {
                return .certificates(try NIOSSLCertificate.fromPEMFile(path))
            } catch {
                throw ConfigurationError(
                    key: ConfigurationKey.upstreamCA.name,
                    "\(path) holds no PEM certificate: \(error)"
                )
            }
        }
        let serverName = settings.string(.upstreamServerName)
        // The broadcast and channel management hosts default to Apple's; when the device host of
        // an environment is set (a mock, a proxy), they default to that address too.
        func endpoint(
            _ key: ConfigurationKey,
            orSetKey fallbackKey: ConfigurationKey?,
            standard: APNsEndpoint
        ) throws -> APNsEndpoint {
            guard
                let key = settings.string(key) != nil
                    ? key : fallbackKey.flatMap({ settings.string($0) != nil ? $0 : nil })
            else {
                return standard
            }
            let address = try settings.address(key, default: "")!
            return APNsEndpoint(
                host: address.host,
                port: address.port,
                serverHostname: serverName,
                trustRoots: trustRoots
            )
        }
        var channelManagement: [APNsEnvironment: APNsEndpoint] = [:]
        for (environment, device, broadcast, management) in [
            (
                APNsEnvironment.production, ConfigurationKey.upstreamProduction,
                ConfigurationKey.upstreamBroadcastProduction, ConfigurationKey.upstreamChannelsProduction
            ),
            (
                APNsEnvironment.sandbox, ConfigurationKey.upstreamSandbox, ConfigurationKey.upstreamBroadcastSandbox,
                ConfigurationKey.upstreamChannelsSandbox
            ),
        ] {
            upstream.endpoints[environment] = try endpoint(
                device,
                orSetKey: nil,
                standard: upstream.endpoints[environment]!
            )
            upstream.broadcastEndpoints[environment] = try endpoint(
                broadcast,
                orSetKey: device,
                standard: upstream.broadcastEndpoints[environment]!
            )
            channelManagement[environment] = try endpoint(
                management,
                orSetKey: device,
                standard: environment == .production ? .channelManagementProduction : .channelManagementSandbox
            )
        }
        var client = upstream.client
        client.connectionsPerPool = try settings.int(.upstreamConnectionsPerPool, default: client.connectionsPerPool)
        client.maximumConnectionsPerPool = try settings.int(
            .upstreamMaximumConnectionsPerPool,
            default: client.maximumConnectionsPerPool
        )
        client.maximumStreamsPerConnection = try settings.int(
            .upstreamMaximumStreams,
            default: client.maximumStreamsPerConnection
        )
        client.connectTimeout = try settings.timeAmount(.upstreamConnectTimeout, default: client.connectTimeout)
        client.pingInterval = try settings.timeAmount(.upstreamPingInterval, default: client.pingInterval)
        client.retryBudget = try settings.timeAmount(.upstreamRetryBudget, default: client.retryBudget)
        client.requestTimeout = try settings.timeAmount(.upstreamRequestTimeout, default: client.requestTimeout)
        client.maximumQueuedRequests = try settings.int(.upstreamMaximumQueued, default: client.maximumQueuedRequests)
        client.engine = try Self.engine(settings, default: client.engine)
        upstream.client = client
        return (upstream, channelManagement)
    }

    /// `upstream.http2Engine`: `auto` (libnghttp2 when the build has it), `nio` or `nghttp2`; the
    /// latter only in a build with the `NGHTTP2Engine` trait.
    static func engine(_ settings: SettingsReader, default preferred: APNsHTTP2Engine) throws -> APNsHTTP2Engine {
        let chosen: APNsHTTP2Engine? = try settings.choice(
            .upstreamHTTP2Engine,
            default: nil,
            ["auto": nil, "nio": .nio, "nghttp2": .nghttp2]
        )
        guard let chosen else { return preferred }
        guard chosen.isAvailable else {
            throw ConfigurationError(
                key: ConfigurationKey.upstreamHTTP2Engine.name,
                "this build has no libnghttp2 engine: build with `swift build -c release --traits NGHTTP2Engine` (Debian package libnghttp2-dev), or choose nio or auto"
            )
        }
        return chosen
    }
}

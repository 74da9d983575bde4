import NIOSSL

/// Where an APNs environment is reached, and how its certificate is checked.
public struct APNsEndpoint: Sendable {
    /// The address to connect to (a name or an IP address).
    public var host: String
    public var port: Int
    /// The name in the server's certificate, sent as SNI and `:authority`. Defaults to `host`.
    public var serverHostname: String
    /// `nil`: the system's trust store.
    public var trustRoots: NIOSSLTrustRoots?

    public init(host: String, port: Int = 443, serverHostname: String? = nil, trustRoots: NIOSSLTrustRoots? = nil) {
        self.host = host
        self.port = port
        self.serverHostname = serverHostname ?? host
        self.trustRoots = trustRoots
    }

    public static let production = APNsEndpoint(host: "api.push.apple.com")
    public static let sandbox = APNsEndpoint(host: "api.sandbox.push.apple.com")
    /// Broadcast push to Live Activity channels (`/4/broadcasts/apps/<bundle id>`).
    public static let broadcastProduction = APNsEndpoint(host: "api-broadcast.push.apple.com")
    public static let broadcastSandbox = APNsEndpoint(host: "api-broadcast.sandbox.push.apple.com")
    /// Channel management (`/1/apps/<bundle id>/channels`): Apple serves it on ports 2196
    /// (production) and 2195 (development).
    public static let channelManagementProduction = APNsEndpoint(
        host: "api-manage-broadcast.push.apple.com",
        port: 2196
    )
    public static let channelManagementSandbox = APNsEndpoint(
        host: "api-manage-broadcast.sandbox.push.apple.com",
        port: 2195
    )

    var authority: String {
        self.port == 443 ? self.serverHostname : "\(self.serverHostname):\(self.port)"
    }
}

import NIOCore

/// One upstream connection's settings, derived from the client's (``APNsClient/Configuration``,
/// where the defaults live), for either engine.
package struct APNsConnectionConfiguration: Sendable {
    package var authority: String
    package var stateMachine: APNsConnectionStateMachine<any APNsStreamOwner>.Configuration
    package var pingInterval: TimeAmount
    /// How often open streams are checked against their deadlines.
    package var deadlineSweepInterval: TimeAmount = .milliseconds(100)
    package var metrics: APNsClientMetrics
    /// Which handler drives the connection: ``APNsConnectionHandler`` (NIOHTTP2) or
    /// ``NGHTTP2ConnectionHandler`` (the client's choice, or NIOHTTP2 when this build lacks it).
    package var engine: APNsHTTP2Engine

    package init(
        authority: String,
        client: APNsClient.Configuration = .init(),
        usesAuthenticationTokens: Bool = true,
        metrics: APNsClientMetrics
    ) {
        self.authority = authority
        self.stateMachine = .init(client, usesAuthenticationTokens: usesAuthenticationTokens)
        self.pingInterval = client.pingInterval
        self.metrics = metrics
        self.engine = client.engine.isAvailable ? client.engine : .nio
    }

    /// One HTTP/2 setting, by its code in RFC 9113.
    package struct Setting: Sendable {
        package enum Parameter: UInt16, Sendable {
            case enablePush = 0x2
            case maxConcurrentStreams = 0x3
            case initialWindowSize = 0x4
            case maxHeaderListSize = 0x6
        }

        package var parameter: Parameter
        package var value: Int
    }

    /// The SETTINGS the client sends first, on either engine: no push, 100 streams from the
    /// server (which never opens one), a 64 KiB stream window, a bound on answer headers.
    package static let initialSettings: [Setting] = [
        Setting(parameter: .enablePush, value: 0),
        Setting(parameter: .maxConcurrentStreams, value: 100),
        Setting(parameter: .initialWindowSize, value: 65_535),
        Setting(parameter: .maxHeaderListSize, value: 16_384),
    ]
}

// Every configuration key, once. Loading (BridgeSettings+*.swift) reads each through its entry
// here; docs/configuration.md describes each in a table a test compares with these lists.

extension ConfigurationKey {
    // Logging and defaults.
    static let logLevel = Self(
        "log.level",
        .choice(["trace", "debug", "info", "notice", "warning", "error", "critical"]),
        .live,
        "the least level logged (default info)"
    )
    static let logFormat = Self(
        "log.format",
        .choice(["text", "json"]),
        .restart,
        "text lines, or JSON Lines for log shippers (default text)"
    )
    static let environment = Self(
        "environment",
        .choice(["production", "sandbox", "development"]),
        .live,
        "the APNs environment of tenants that set none and whose certificate does not tell (default production)"
    )

    // The gateway listener.
    static let gatewayListen = Self(
        "gateway.listen",
        .address(allowsOff: false),
        .restart,
        "the legacy gateway (default 0.0.0.0:2195)"
    )
    static let gatewayMaximumConnections = Self(
        "gateway.maximumConnections",
        .whole(1...1_000_000),
        .restart,
        "provider connections beyond this are closed at once"
    )
    static let gatewayMaximumHandshakes = Self(
        "gateway.maximumHandshakes",
        .whole(1...1_000_000),
        .restart,
        "connections still in their TLS handshake beyond this are closed at once"
    )
    static let gatewayMaximumHandshakesPerAddress = Self(
        "gateway.maximumHandshakesPerAddress",
        .whole(1...1_000_000),
        .restart,
        "the same bound for one source address"
    )
    static let gatewayMaximumInFlight = Self(
        "gateway.maximumInFlight",
        .whole(1...100_000),
        .restart,
        "per connection: notifications without an outcome; reading pauses beyond it"
    )
    static let gatewayHandshakeTimeout = Self(
        "gateway.handshakeTimeoutSeconds",
        .seconds(0.1...600),
        .restart,
        "a TLS handshake not finished by then is closed"
    )
    static let gatewayIdleTimeout = Self(
        "gateway.idleTimeoutSeconds",
        .seconds(0...864_000),
        .restart,
        "a silent connection with nothing in flight is closed after this; 0: never"
    )
    static let gatewayShutdownGrace = Self(
        "gateway.shutdownGraceSeconds",
        .seconds(0...600),
        .restart,
        "at shutdown, how long notifications in flight may take before status 10"
    )
    static let gatewayErrorDrain = Self(
        "gateway.errorDrainSeconds",
        .seconds(0...10),
        .restart,
        "after an error-response, how long what the provider still sends is read and dropped before close_notify (default 0.5)"
    )

    // The feedback listener and its lists.
    static let feedbackListen = Self(
        "feedback.listen",
        .address(allowsOff: false),
        .restart,
        "the feedback service (default 0.0.0.0:2196)"
    )
    static let feedbackMaximumConnections = Self(
        "feedback.maximumConnections",
        .whole(1...1_000_000),
        .restart,
        "poller connections beyond this are closed at once"
    )
    static let feedbackMaximumHandshakes = Self(
        "feedback.maximumHandshakes",
        .whole(1...1_000_000),
        .restart,
        "as gateway.maximumHandshakes, for pollers"
    )
    static let feedbackMaximumHandshakesPerAddress = Self(
        "feedback.maximumHandshakesPerAddress",
        .whole(1...1_000_000),
        .restart,
        "as gateway.maximumHandshakesPerAddress, for pollers"
    )
    static let feedbackWriteTimeout = Self(
        "feedback.writeTimeoutSeconds",
        .seconds(1...3600),
        .restart,
        "a poller that stops reading this long is cut off"
    )
    static let feedbackCloseDelay = Self(
        "feedback.closeDelaySeconds",
        .seconds(0...60),
        .restart,
        "after the last tuple, how long the poller may close first before close_notify (default 2): a reader this late keeps its last tuple"
    )
    static let feedbackOnly32ByteTokens = Self(
        "feedback.only32ByteTokens",
        .flag,
        .restart,
        "leave tokens that are not 32 bytes out of the lists"
    )
    static let feedbackRetention = Self(
        "feedback.retentionDays",
        .days(0.001...3650),
        .restart,
        "entries not polled within this are removed"
    )

    // The legacy listeners' TLS.
    static let tlsCertificate = Self(
        "tls.certificate",
        .file,
        .live,
        "PEM certificate chain both legacy ports present (required)"
    )
    static let tlsPrivateKey = Self("tls.privateKey", .file, .live, "PEM private key of tls.certificate (required)")
    static let tlsClientCA = Self("tls.clientCA", .files, .live, "PEM bundle(s) provider certificates must chain to")
    static let tlsPinnedFingerprints = Self(
        "tls.pinnedFingerprints",
        .list,
        .live,
        "SHA-256 fingerprints of client certificates trusted by themselves"
    )
    static let tlsAllowTLS13 = Self("tls.allowTLS13", .flag, .live, "offer TLS 1.3 on the legacy ports (default false)")
    static let tlsAllowLegacyTLS = Self("tls.allowLegacyTLS", .flag, .live, "accept TLS 1.0 and 1.1 (default false)")
    static let tlsCloseNotifyWait = Self(
        "tls.closeNotifyWaitSeconds",
        .seconds(0...60),
        .live,
        "after close_notify (an error-response's drain, a poll's close delay), how long the close waits for the client's (default 5); 0: close at once"
    )

    // Both legacy listeners behind a load balancer.
    static let proxyProtocolLoadBalancers = Self(
        "proxyProtocol.loadBalancers",
        .list,
        .restart,
        "addresses or CIDR networks of load balancers whose connections begin with a PROXY protocol header (v1 or v2); empty: off"
    )

    // Reloading.
    static let reloadWatchInterval = Self(
        "reload.watchIntervalSeconds",
        .seconds(0...86_400),
        .restart,
        "how often the configuration and its files are checked for changes (default 10); 0: only on SIGHUP"
    )
    static let tlsReloadInterval = Self(
        "tls.reloadIntervalSeconds",
        .seconds(0...86_400),
        .restart,
        "the name of reload.watchIntervalSeconds before 0.5, read when that one is not set"
    )

    // Upstream credentials and tenants.
    static let credentials = Self("credentials", .names, .live, "names of the upstream credentials (at least one)")
    static let defaultCredentials = Self(
        "defaultCredentials",
        .text,
        .live,
        "credentials of tenants that name none (default the first listed)"
    )
    static let tenants = Self("tenants", .names, .live, "names of the configured tenants")
    static let acceptUnlistedCertificates = Self(
        "acceptUnlistedCertificates",
        .flag,
        .live,
        "whether a trusted certificate that matches no tenant is a tenant of its own (default: true without tenants)"
    )

    // Upstream.
    static let upstreamProduction = Self(
        "upstream.production",
        .address(allowsOff: false),
        .restart,
        "HOST:PORT for production (default api.push.apple.com:443)"
    )
    static let upstreamSandbox = Self(
        "upstream.sandbox",
        .address(allowsOff: false),
        .restart,
        "HOST:PORT for sandbox (default api.sandbox.push.apple.com:443)"
    )
    static let upstreamBroadcastProduction = Self(
        "upstream.broadcast.production",
        .address(allowsOff: false),
        .restart,
        "production's broadcast push API (default Apple's, or upstream.production when set)"
    )
    static let upstreamBroadcastSandbox = Self(
        "upstream.broadcast.sandbox",
        .address(allowsOff: false),
        .restart,
        "sandbox's broadcast push API (default Apple's, or upstream.sandbox when set)"
    )
    static let upstreamChannelsProduction = Self(
        "upstream.channels.production",
        .address(allowsOff: false),
        .restart,
        "production's channel management API (default Apple's, or upstream.production when set)"
    )
    static let upstreamChannelsSandbox = Self(
        "upstream.channels.sandbox",
        .address(allowsOff: false),
        .restart,
        "sandbox's channel management API (default Apple's, or upstream.sandbox when set)"
    )
    static let upstreamCA = Self(
        "upstream.ca",
        .file,
        .restart,
        "PEM CA(s) trusted for the overridden hosts (default the system's roots)"
    )
    static let upstreamServerName = Self(
        "upstream.serverName",
        .text,
        .restart,
        "TLS server name of the overridden hosts (default the host)"
    )
    static let upstreamConnectionsPerPool = Self(
        "upstream.connectionsPerPool",
        .whole(1...64),
        .restart,
        "HTTP/2 connections per credentials and environment"
    )
    static let upstreamMaximumConnectionsPerPool = Self(
        "upstream.maximumConnectionsPerPool",
        .whole(1...256),
        .restart,
        "the most connections, draining ones included: more are opened while every stream is taken and requests wait (at least connectionsPerPool)"
    )
    static let upstreamMaximumStreams = Self(
        "upstream.maximumStreamsPerConnection",
        .whole(1...100_000),
        .restart,
        "our own bound on open streams per connection"
    )
    static let upstreamConnectTimeout = Self(
        "upstream.connectTimeoutSeconds",
        .seconds(0.1...600),
        .restart,
        "how long a connection to APNs may take to open"
    )
    static let upstreamPingInterval = Self(
        "upstream.pingIntervalSeconds",
        .seconds(1...3600),
        .restart,
        "HTTP/2 PING health checks"
    )
    static let upstreamRetryBudget = Self(
        "upstream.retryBudgetSeconds",
        .seconds(0...3600),
        .restart,
        "how long a notification may be tried upstream, retries included (a written attempt still waits its request timeout)"
    )
    static let upstreamRequestTimeout = Self(
        "upstream.requestTimeoutSeconds",
        .seconds(0.1...600),
        .restart,
        "how long one attempt may wait for room on a connection, then, from its write, for its answer, before it is reset and retried"
    )
    static let upstreamMaximumQueued = Self(
        "upstream.maximumQueuedRequests",
        .whole(1...10_000_000),
        .restart,
        "requests waiting for a connection, per pool"
    )
    static let upstreamHTTP2Engine = Self(
        "upstream.http2Engine",
        .choice(["auto", "nio", "nghttp2"]),
        .restart,
        "the HTTP/2 implementation upstream (default auto)"
    )

    // The store and the admin port.
    package static let storeURL = Self(
        "store.url",
        .text,
        .restart,
        "sqlite:PATH or postgres://user:password@host:port/database (default sqlite:apns-bridge.sqlite)"
    )
    static let storeResendWindow = Self(
        "store.resendWindowSeconds",
        .seconds(1...86_400),
        .restart,
        "how long a resend record is kept"
    )
    static let storeSQLiteSynchronous = Self(
        "store.sqliteSynchronous",
        .choice(["full", "normal"]),
        .restart,
        "SQLite: fsync each commit (full), or survive a process crash only (normal)"
    )
    static let usageRetention = Self(
        "usage.retentionDays",
        .days(1...3650),
        .restart,
        "per tenant and day usage, and the push log's failures in the store, older than this are removed"
    )
    static let pushLogEntries = Self(
        "pushLog.entries",
        .whole(0...10_000_000),
        .restart,
        "notifications the push log keeps in memory per instance, the oldest dropped first, its failures copied to the store; 0 turns it off (default 100000)"
    )
    static let pushLogFullTokens = Self(
        "pushLog.fullTokens",
        .flag,
        .restart,
        "keep whole device tokens in the push log, shown on the admin port (default false: a 4-byte prefix and a hash)"
    )
    static let adminListen = Self(
        "admin.listen",
        .address(allowsOff: true),
        .restart,
        "/metrics, /healthz, /readyz, /push-log and the status page (default 127.0.0.1:9180)"
    )

    /// Every key without a name in it.
    package static let schema: [ConfigurationKey] = [
        .logLevel, .logFormat, .environment,
        .gatewayListen, .gatewayMaximumConnections, .gatewayMaximumHandshakes, .gatewayMaximumHandshakesPerAddress,
        .gatewayMaximumInFlight, .gatewayHandshakeTimeout, .gatewayIdleTimeout, .gatewayShutdownGrace,
        .gatewayErrorDrain,
        .feedbackListen, .feedbackMaximumConnections, .feedbackMaximumHandshakes, .feedbackMaximumHandshakesPerAddress,
        .feedbackWriteTimeout, .feedbackCloseDelay, .feedbackOnly32ByteTokens, .feedbackRetention,
        .tlsCertificate, .tlsPrivateKey, .tlsClientCA, .tlsPinnedFingerprints, .tlsAllowTLS13, .tlsAllowLegacyTLS,
        .tlsCloseNotifyWait,
        .proxyProtocolLoadBalancers,
        .reloadWatchInterval, .tlsReloadInterval,
        .credentials, .defaultCredentials, .tenants, .acceptUnlistedCertificates,
        .upstreamProduction, .upstreamSandbox, .upstreamBroadcastProduction, .upstreamBroadcastSandbox,
        .upstreamChannelsProduction, .upstreamChannelsSandbox, .upstreamCA, .upstreamServerName,
        .upstreamConnectionsPerPool, .upstreamMaximumConnectionsPerPool, .upstreamMaximumStreams,
        .upstreamConnectTimeout, .upstreamPingInterval,
        .upstreamRetryBudget, .upstreamRequestTimeout, .upstreamMaximumQueued, .upstreamHTTP2Engine,
        .storeURL, .storeResendWindow, .storeSQLiteSynchronous, .usageRetention, .pushLogEntries,
        .pushLogFullTokens, .adminListen,
    ]
}

import Logging
import NIOCore
import NIOHTTP2

/// The handlers of an HTTP/2 engine after TLS, for ``APNsConnection`` and for the tests that
/// drive either engine on an `EmbeddedChannel`.
package enum APNsEnginePipeline {
    /// The HTTP/2 engine's handlers, after TLS: `NIOHTTP2Handler` and ``APNsConnectionHandler``,
    /// or ``NGHTTP2ConnectionHandler``. The engine tests put the same handlers on an
    /// `EmbeddedChannel`.
    package static func addEngine(
        to pipeline: ChannelPipeline.SynchronousOperations,
        connectionID: Int,
        configuration: APNsConnectionConfiguration,
        readyPromise: EventLoopPromise<Void>,
        logger: Logger
    ) throws {
        #if NGHTTP2Engine
        if configuration.engine == .nghttp2 {
            try pipeline.addHandler(
                NGHTTP2ConnectionHandler(
                    connectionID: connectionID,
                    configuration: configuration,
                    readyPromise: readyPromise,
                    logger: logger
                )
            )
            return
        }
        #endif
        var http2 = NIOHTTP2Handler.ConnectionConfiguration()
        http2.initialSettings = APNsConnectionConfiguration.initialSettings.map { setting in
            let parameter: HTTP2SettingsParameter =
                switch setting.parameter {
                case .enablePush: .enablePush
                case .maxConcurrentStreams: .maxConcurrentStreams
                case .initialWindowSize: .initialWindowSize
                case .maxHeaderListSize: .maxHeaderListSize
                }
            return HTTP2Setting(parameter: parameter, value: setting.value)
        }
        // NIOHTTP2's header-block and content-length checks are off (docs/performance-log.md,
        // "After loop-local pools"). The client writes its own header blocks
        // (always valid: the mock and nghttpd tests hold them to it) and reads answers field by
        // field, bodies cut at a bound.
        http2.headerBlockValidation = .disabled
        http2.contentLengthValidation = .disabled
        try pipeline.addHandler(NIOHTTP2Handler(mode: .client, connectionConfiguration: http2))
        try pipeline.addHandler(
            APNsConnectionHandler(
                connectionID: connectionID,
                configuration: configuration,
                readyPromise: readyPromise,
                logger: logger
            )
        )
    }

    /// The connection core of the engine handler ``addEngine(to:connectionID:configuration:readyPromise:logger:)``
    /// added: requests go to it.
    package static func engineHandler(
        in pipeline: ChannelPipeline.SynchronousOperations,
        engine: APNsHTTP2Engine
    ) throws -> any APNsConnectionDriver {
        #if NGHTTP2Engine
        if engine == .nghttp2 {
            return try pipeline.handler(type: NGHTTP2ConnectionHandler.self).core
        }
        #endif
        return try pipeline.handler(type: APNsConnectionHandler.self).core
    }
}

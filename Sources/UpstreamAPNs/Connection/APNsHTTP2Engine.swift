import NIOCore

/// Which HTTP/2 implementation a client's connections run on.
///
/// - `nio`: swift-nio-http2's `NIOHTTP2Handler`, in every build.
/// - `nghttp2`: libnghttp2 in memory mode, in builds with the
///   `NGHTTP2Engine` package trait (`swift build --traits NGHTTP2Engine`, Debian
///   `libnghttp2-dev`). About a third of the bridge's CPU per notification went to NIOHTTP2 and
///   its HPACK (docs/performance.md).
///
/// Both drive the same connection state machine, so a request behaves alike on either.
public enum APNsHTTP2Engine: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case nio
    case nghttp2

    /// The engines this build has.
    public static var available: [APNsHTTP2Engine] {
        #if NGHTTP2Engine
        [.nio, .nghttp2]
        #else
        [.nio]
        #endif
    }

    /// The fastest engine this build has: libnghttp2 when the trait is on.
    public static var preferred: APNsHTTP2Engine {
        Self.available.contains(.nghttp2) ? .nghttp2 : .nio
    }

    public var isAvailable: Bool { Self.available.contains(self) }

    public var description: String { self.rawValue }
}

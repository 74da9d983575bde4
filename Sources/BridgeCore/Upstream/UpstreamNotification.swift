import LegacyProtocol
import NIOCore

/// One notification on its way upstream: the decoded frame and the tenant it belongs to.
public struct UpstreamNotification: Hashable, Sendable {
    public var tenant: Tenant
    public var frame: NotificationFrame

    public init(tenant: Tenant, frame: NotificationFrame) {
        self.tenant = tenant
        self.frame = frame
    }

    /// `:path` of the HTTP/2 request: `/3/device/<lowercase hex token>`.
    public var path: String {
        let token = self.frame.deviceToken
        let prefix: StaticString = "/3/device/"
        // One allocation: the prefix and two lowercase hex digits per byte, written in place.
        return String(unsafeUninitializedCapacity: prefix.utf8CodeUnitCount + 2 * token.readableBytes) { output in
            var position = 0
            prefix.withUTF8Buffer { bytes in
                for byte in bytes {
                    output[position] = byte
                    position += 1
                }
            }
            token.withUnsafeReadableBytes { bytes in
                for byte in bytes {
                    output[position] = Self.hexDigit(byte >> 4)
                    output[position + 1] = Self.hexDigit(byte & 0x0F)
                    position += 2
                }
            }
            return position
        }
    }

    @inline(__always)
    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") - 10 + nibble
    }
}

/// The seam between a provider session and the modern APNs provider API.
///
/// The gateway calls ``send(_:on:)`` once for each notification it forwards and feeds the
/// outcome back into the session. An implementation does its own retries (within its retry
/// budget) and maps the HTTP/2 answer to a ``NotificationOutcome``; the future it returns always
/// completes, on any event loop.
public protocol NotificationUpstream: Sendable {
    func send(_ notification: UpstreamNotification, on eventLoop: any EventLoop) -> EventLoopFuture<NotificationOutcome>
}

import NIOCore

/// Why one attempt of a request got no answer from APNs.
public struct APNsStreamFailure: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Hashable, Sendable {
        /// APNs certainly did not process it: above a GOAWAY's `lastStreamID`, refused with
        /// `REFUSED_STREAM`, or never written. Safe to send again at once.
        case unprocessed
        /// The stream was reset or the connection lost after the request was written: APNs may or
        /// may not have processed it.
        case interrupted
        /// The server reset this stream with `PROTOCOL_ERROR`: it refuses the request itself
        /// (a malformed header, say), so sending it again, on any connection, fails the same way.
        case refused
    }

    public var kind: Kind
    public var detail: String

    public static func unprocessed(_ detail: String) -> APNsStreamFailure {
        APNsStreamFailure(kind: .unprocessed, detail: detail)
    }

    public static func interrupted(_ detail: String) -> APNsStreamFailure {
        APNsStreamFailure(kind: .interrupted, detail: detail)
    }

    public static func refused(_ detail: String) -> APNsStreamFailure {
        APNsStreamFailure(kind: .refused, detail: detail)
    }

    public var description: String { "\(self.kind): \(self.detail)" }
}

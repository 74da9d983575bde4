import BridgeCore
import NIOCore

/// An HTTP/2 answer from APNs: status, `apns-id`, and for errors the reason and (410) timestamp.
public struct APNsResponse: Hashable, Sendable {
    public var status: Int
    public var apnsID: String?
    public var reason: APNsReason?
    /// Milliseconds since 1970, sent with 410.
    public var timestamp: UInt64?

    public init(status: Int, apnsID: String?, reason: APNsReason? = nil, timestamp: UInt64? = nil) {
        self.status = status
        self.apnsID = apnsID
        self.reason = reason
        self.timestamp = timestamp
    }

    public var classification: UpstreamResponseClassification {
        UpstreamResponseClassification(status: self.status, reason: self.reason, timestamp: self.timestamp)
    }
}

/// Why a request got no answer from APNs.
public struct APNsStreamFailure: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Hashable, Sendable {
        /// APNs certainly did not process it: above a GOAWAY's `lastStreamID`, refused with
        /// `REFUSED_STREAM`, or never written. Safe to send again at once.
        case unprocessed
        /// The stream was reset or the connection lost after the request was written: APNs may or
        /// may not have processed it.
        case interrupted
    }

    public var kind: Kind
    public var detail: String

    public static func unprocessed(_ detail: String) -> APNsStreamFailure {
        APNsStreamFailure(kind: .unprocessed, detail: detail)
    }

    public static func interrupted(_ detail: String) -> APNsStreamFailure {
        APNsStreamFailure(kind: .interrupted, detail: detail)
    }

    public var description: String { "\(self.kind): \(self.detail)" }
}

import Foundation

/// The names of the per-day counters in the store. One table holds them all, so a new kind of
/// figure needs no schema change.
public enum UsageCounter {
    /// Notifications received in a frame of this command (0, 1 or 2).
    public static func command(_ command: UInt8) -> String { "command.\(command)" }
    /// Notifications APNs accepted (200) that were not broadcasts.
    public static let accepted = "accepted"
    /// Notifications to a Live Activity channel token that APNs accepted.
    public static let broadcast = "broadcast"
    /// Notifications APNs answered 410: no error-response, the token went to the feedback list.
    public static let unregistered = "unregistered"
    /// Notifications given up after 429s: the provider was told nothing.
    public static let dropped = "dropped"
    /// Notifications that failed with this legacy status (an error-response, when the frame's
    /// command can carry one).
    public static func status(_ status: UInt8) -> String { "status.\(status)" }
    /// Provider connections whose handshake negotiated this TLS version (`TLSv1.2`, `TLSv1.3`).
    public static func tls(_ version: String) -> String { "tls.\(version)" }
    /// Feedback polls (connections to the feedback port that were served).
    public static let feedbackPolls = "feedback.polls"
    /// Feedback tuples delivered to pollers.
    public static let feedbackTuples = "feedback.tuples"
}

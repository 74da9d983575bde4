import Foundation

/// UNIX seconds as the migration view shows them.
public enum UsageTimestamp {
    /// 9999-12-31T23:59:59Z: the last second a date formatter is asked to show.
    public static let latest: Int64 = 253_402_300_799

    /// `value` within 0 ... ``latest``.
    public static func clamped(_ value: Int64) -> Int64 {
        min(max(value, 0), Self.latest)
    }
}

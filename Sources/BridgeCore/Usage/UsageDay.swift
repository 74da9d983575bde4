import Foundation

/// A UTC calendar day, as days since 1970-01-01: the unit usage is kept in.
public struct UsageDay: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var number: Int

    public init(number: Int) {
        self.number = number
    }

    /// The day `unixSeconds` falls on (UTC).
    public init(unixSeconds: Int64) {
        self.number = Int((Double(unixSeconds) / 86_400).rounded(.down))
    }

    public init(_ date: Date) {
        self.init(unixSeconds: Int64(date.timeIntervalSince1970.rounded(.down)))
    }

    public var start: Date { Date(timeIntervalSince1970: TimeInterval(self.number) * 86_400) }

    /// `2026-11-25`.
    public var description: String {
        self.start.formatted(Date.ISO8601FormatStyle().year().month().day())
    }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.number < rhs.number }
}

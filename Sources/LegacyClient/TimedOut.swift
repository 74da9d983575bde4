/// Something awaited did not happen within its time limit.
public struct TimedOut: Error, CustomStringConvertible {
    public var what: String
    public init(what: String) { self.what = what }
    public var description: String { "timed out waiting for \(self.what)" }
}

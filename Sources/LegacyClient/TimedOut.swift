/// Something awaited did not happen within its time limit.
package struct TimedOut: Error, CustomStringConvertible {
    package var what: String
    package init(what: String) { self.what = what }
    package var description: String { "timed out waiting for \(self.what)" }
}

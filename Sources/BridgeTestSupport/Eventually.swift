import LegacyClient

/// Waits for something a test cannot await directly (a gauge another event loop sets, a row
/// another instance commits, a line a child process logs): checks `condition` at once, then
/// every `interval`, until it holds, or throws ``TimedOut`` naming `what` after `timeout`.
///
/// The one polling helper of the tests. The timeout is a bound on a hang, never a measure of
/// speed: a slow machine only takes longer to pass.
package func eventually(
    _ what: @autoclosure () -> String = "a condition",
    timeout: Duration = .seconds(10),
    interval: Duration = .milliseconds(10),
    _ condition: () async throws -> Bool
) async throws {
    _ = try await eventually(what(), timeout: timeout, interval: interval) { try await condition() ? true : nil }
}

/// The first value `value` gives that is not `nil`, checked as the condition of the other `eventually`
/// checks its condition.
package func eventually<Value>(
    _ what: @autoclosure () -> String = "a value",
    timeout: Duration = .seconds(10),
    interval: Duration = .milliseconds(10),
    _ value: () async throws -> Value?
) async throws -> Value {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while true {
        if let found = try await value() { return found }
        guard clock.now < deadline else { throw TimedOut(what: what()) }
        try await Task.sleep(for: interval)
    }
}

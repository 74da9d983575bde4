import Logging
import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO

// How the PostgreSQL store runs its statements: each within a time bound, never on a
// connection the pool hands out closed (docs/operations.md#store-outage).
extension PostgresBridgeStore {
    /// Runs `body` on a pooled connection, and gives it up if it has not finished within
    /// `timeout`: the connection is closed and the call throws, so that a write that must be
    /// retried is (docs/operations.md#store-outage). Every statement of the store goes through
    /// here but two: the LISTEN, which holds its connection for as long as it lasts, and the
    /// schema migration at open, which may wait for another instance's migration lock.
    ///
    /// A connection the pool leases already closed is given back unused, and another leased:
    /// the pool hears of a close a moment after it happened (up to 2 s was seen on a loaded
    /// machine), so each new lease waits a little longer, from 10 ms to 200 ms, within
    /// `timeout` in all.
    static func withConnection<Result: Sendable>(
        _ client: PostgresClient,
        timeout: Duration,
        beforeStatement: () throws -> Void = {},
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        let deadline = ContinuousClock.now + timeout
        var pause = Duration.milliseconds(10)
        while true {
            do {
                return try await Self.withConnectionOnce(
                    client,
                    timeout: timeout,
                    beforeStatement: beforeStatement,
                    body
                )
            } catch is ClosedConnectionLeased where ContinuousClock.now + pause < deadline {
                try await Task.sleep(for: pause)
                pause = min(pause * 2, .milliseconds(200))
            }
        }
    }

    /// One lease of ``withConnection(_:timeout:beforeStatement:_:)``.
    ///
    /// postgres-nio (1.33) hands a statement to its connection's channel and waits for an
    /// answer that a channel already closed never gives: the statement is dropped with the
    /// write, and nothing completes it, not even when its task is cancelled. The pool can lease
    /// such a connection for a moment after the server ended it (a restart) or this store
    /// closed it (a timeout), before it hears of the close. So a connection leased closed is
    /// not used (``ClosedConnectionLeased``: nothing was sent), and `body` runs in a task of its
    /// own that this call does not wait for once the time is up (the one such task in the
    /// store: a child task would hold the caller for ever).
    ///
    /// `beforeStatement` runs once the connection is leased, before `body`; what it throws is
    /// thrown (nothing sent either).
    private static func withConnectionOnce<Result: Sendable>(
        _ client: PostgresClient,
        timeout: Duration,
        beforeStatement: () throws -> Void,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        try await client.withConnection { connection in
            guard !connection.isClosed else { throw ClosedConnectionLeased() }
            try beforeStatement()
            let promise = connection.eventLoop.makePromise(of: Result.self)
            let settled = NIOLockedValueBox(false)
            @Sendable func settle(_ result: Swift.Result<Result, any Error>) {
                let first = settled.withLockedValue { settled in
                    defer { settled = true }
                    return !settled
                }
                if first { promise.completeWith(result) }
            }
            let work = Task {
                do {
                    settle(.success(try await body(connection)))
                } catch {
                    settle(.failure(error))
                }
            }
            let timer = connection.eventLoop.scheduleTask(in: TimeAmount(timeout)) {
                settle(.failure(StatementTimedOut(after: timeout)))
                work.cancel()
                connection.close().whenComplete { _ in }
            }
            defer { timer.cancel() }
            return try await promise.futureResult.get()
        }
    }

    /// Runs one statement through ``withConnection(_:timeout:beforeStatement:_:)`` and reads its rows
    /// with `read`.
    func run<Result: Sendable>(
        _ query: PostgresQuery,
        _ read: @escaping @Sendable (PostgresRowSequence) async throws -> Result
    ) async throws -> Result {
        try await Self.withConnection(self.client, timeout: self.configuration.statementTimeout) {
            [logger] connection in
            try await read(try await connection.query(query, logger: logger))
        }
    }

    /// The pool leased a connection that was already closed; nothing was sent on it.
    struct ClosedConnectionLeased: Error, CustomStringConvertible {
        var description: String { "the pool leased a connection that was already closed; nothing was sent" }
    }

    struct StatementTimedOut: Error, CustomStringConvertible {
        var after: Duration
        var description: String { "the statement had no answer within \(self.after); its connection was closed" }
    }
}

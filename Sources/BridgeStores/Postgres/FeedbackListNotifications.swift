import BridgeCore
import LegacyProtocol
import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// How instances sharing a PostgreSQL store tell each other about new feedback entries, so that
/// each instance's ``FeedbackListFilter`` knows every token that may be on a list.
///
/// The transaction that writes 410s also runs `pg_notify` on ``channel`` with the entries'
/// fingerprints; PostgreSQL delivers it when (and only if) the transaction commits. Each
/// instance keeps one pooled connection listening. One line per entry,
/// `<fingerprint, 16 hex digits> <environment> <tenant>`, as many lines per notification as
/// fit under PostgreSQL's 8,000-byte payload limit.
///
/// A 200 that reaches one instance before the other instance's notification (milliseconds)
/// skips the store as if it had come before the 410: answers for one token from two instances
/// have no order to keep anyway.
///
/// The same connection listens on ``resendOutcomeChannel``: a resend outcome written by any
/// instance notifies the record's id, which wakes a claim of this instance waiting for it
/// (``ResendOutcomeWaiters``) at once instead of at its next check of the table.
enum FeedbackListNotifications {
    static let channel = "apns_bridge_feedback_entries"
    static let resendOutcomeChannel = "apns_bridge_resend_outcomes"
    /// Under PostgreSQL's limit of 8,000 bytes per payload.
    static let maximumPayloadBytes = 7_000

    static func payloads(for entries: [FeedbackEntry]) -> [String] {
        var payloads: [String] = []
        var current = ""
        for entry in entries {
            let fingerprint = FeedbackListFilter.fingerprint(entry.deviceToken)
            let hex = String(fingerprint, radix: 16)
            let line =
                String(repeating: "0", count: 16 - hex.count) + hex + " \(entry.environment.rawValue) \(entry.tenant)\n"
            if current.utf8.count + line.utf8.count > Self.maximumPayloadBytes, !current.isEmpty {
                payloads.append(current)
                current = ""
            }
            current += line
        }
        if !current.isEmpty { payloads.append(current) }
        return payloads
    }

    /// Adds every entry named in `payload` to `filter`; lines it cannot read are skipped.
    static func apply(_ payload: String, to filter: FeedbackListFilter) {
        for line in payload.split(separator: "\n") {
            let fields = line.split(separator: " ", maxSplits: 2)
            guard fields.count == 3,
                let fingerprint = UInt64(fields[0], radix: 16),
                let environment = APNsEnvironment(rawValue: String(fields[1]))
            else { continue }
            filter.insert(
                fingerprint: fingerprint,
                on: FeedbackListFilter.List(tenant: String(fields[2]), environment: environment)
            )
        }
    }

    /// Listens for other instances' feedback entries (``channel``, into `filter`) and for
    /// resend outcomes (``resendOutcomeChannel``, to `outcomeWritten`) until the task is
    /// cancelled, each on a connection of its own: one listen per connection, as postgres-nio
    /// ends a listen's sequence when its connection goes. `listening` hears when the first
    /// listen for entries is in place, or the error if it fails (then this returns).
    static func listen(
        client: PostgresClient,
        filter: FeedbackListFilter,
        outcomeWritten: @escaping @Sendable (_ recordID: Int64) -> Void,
        logger: Logger,
        listening: AsyncThrowingStream<Void, any Error>.Continuation
    ) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                // A connection lost later is replaced after a second, and the filter is then
                // rebuilt from the table (notifications sent meanwhile were missed).
                await Self.listen(
                    on: Self.channel,
                    what: "other instances' feedback entries",
                    client: client,
                    logger: logger,
                    listening: listening,
                    reconnected: { try await PostgresBridgeStore.rebuild(filter, client: client, logger: logger) },
                    received: { Self.apply($0, to: filter) }
                )
            }
            group.addTask {
                // Outcomes written while it was lost are seen by the waiting claims' checks.
                await Self.listen(
                    on: Self.resendOutcomeChannel,
                    what: "resend outcomes",
                    client: client,
                    logger: logger,
                    listening: nil,
                    reconnected: {},
                    received: { payload in
                        if let id = Int64(payload) { outcomeWritten(id) }
                    }
                )
            }
        }
    }

    /// One listen, until the task is cancelled: yields to `listening` each time it is in place;
    /// if the first listen fails, `listening` finishes with the error and this returns (without
    /// `listening`, it is retried). A connection lost later is replaced after a second, and
    /// `reconnected` runs once the listen is in place again.
    private static func listen(
        on channel: String,
        what: String,
        client: PostgresClient,
        logger: Logger,
        listening: AsyncThrowingStream<Void, any Error>.Continuation?,
        reconnected: @escaping @Sendable () async throws -> Void,
        received: @escaping @Sendable (String) -> Void
    ) async {
        // Whether a listen was ever in place: a later failure is retried, not reported.
        let listened = Mutex(false)
        while !Task.isCancelled {
            let reconnecting = listened.withLock { $0 }
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: channel) { notifications in
                        if reconnecting {
                            try await reconnected()
                            logger.notice("listening for \(what) again")
                        }
                        listened.withLock { $0 = true }
                        listening?.yield()
                        for try await notification in notifications {
                            received(notification.payload)
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                if let listening, !listened.withLock({ $0 }) {
                    listening.finish(throwing: error)
                    return
                }
                logger.warning(
                    "lost the listen for \(what); retrying in 1 s",
                    metadata: ["error": "\(String(reflecting: error))"]
                )
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }
}

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
enum FeedbackListNotifications {
    static let channel = "apns_bridge_feedback_entries"
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

    /// Listens on ``channel`` until the task is cancelled, yielding to `listening` each time the
    /// listen is in place. If the first listen fails, `listening` finishes with the error and
    /// this returns. A connection lost later is replaced after a second, and the filter is then
    /// rebuilt from the table (notifications sent meanwhile were missed).
    static func listen(
        client: PostgresClient,
        filter: FeedbackListFilter,
        statementTimeout: Duration,
        logger: Logger,
        listening: AsyncThrowingStream<Void, any Error>.Continuation
    ) async {
        // Whether a listen was ever in place: a later failure is retried, not reported.
        let listened = Mutex(false)
        while !Task.isCancelled {
            let reconnecting = listened.withLock { $0 }
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: Self.channel) { notifications in
                        if reconnecting {
                            try await PostgresBridgeStore.rebuild(
                                filter,
                                client: client,
                                timeout: statementTimeout,
                                logger: logger
                            )
                            logger.notice("listening for other instances' feedback entries again")
                        }
                        listened.withLock { $0 = true }
                        listening.yield()
                        for try await notification in notifications {
                            Self.apply(notification.payload, to: filter)
                        }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                guard listened.withLock({ $0 }) else {
                    listening.finish(throwing: error)
                    return
                }
                logger.warning(
                    "lost the listen for other instances' feedback entries; retrying in 1 s",
                    metadata: ["error": "\(String(reflecting: error))"]
                )
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }
}

import BridgeCore
import LegacyProtocol
import NIOCore
import Synchronization

/// Resend records in this process's memory, for tests: the gateway's harness, and the tests of
/// the rules every store keeps.
///
/// A claim of a record whose outcome is still pending waits for ``resolve(_:outcome:on:)``, at
/// most for the record window; if the outcome never comes, the resend is forwarded again
/// (``ResendClaim/outcomeUnknown(firstSentAs:)``), never answered with a failure nobody saw.
package final class InMemoryResendRecordStore: ResendRecordStore {
    private struct Entry {
        var serial: UInt64
        var expiry: NIODeadline
        var outcome: NotificationOutcome?
        var notificationID: ForwardedNotification.ID?
    }

    private struct Waiter {
        var serial: UInt64
        var notificationID: ForwardedNotification.ID?
        var promise: EventLoopPromise<ResendClaim>
    }

    private struct Records {
        var entries: [ResendRecordKey: [Entry]] = [:]
        /// Claims of pending records, waiting for their outcome.
        var waiters: [ResendRecordKey: [Waiter]] = [:]
        var count = 0
        var nextSerial: UInt64 = 0
        var lastSweep: NIODeadline?

        /// Drops expired records.
        mutating func removeExpired(now: NIODeadline) {
            for (key, list) in self.entries {
                let kept = list.filter { $0.expiry >= now }
                self.count -= list.count - kept.count
                self.entries[key] = kept.isEmpty ? nil : kept
            }
            self.lastSweep = now
        }
    }

    package let window: TimeAmount
    private let now: @Sendable () -> NIODeadline
    private let records = Mutex(Records())
    private let horizons = ResendRecordHorizons()

    /// - Parameters:
    ///   - window: how long a record is kept (docs/protocol.md#resend-records: 2 minutes by default).
    ///   - now: the clock; injected by tests.
    package init(window: TimeAmount = .minutes(2), now: @escaping @Sendable () -> NIODeadline = { .now() }) {
        self.window = window
        self.now = now
    }

    /// Records currently held (pending and resolved, not yet claimed or expired).
    package var count: Int {
        self.records.withLock { $0.count }
    }

    package func mayHoldLiveRecords(tenant: String) -> Bool {
        self.horizons.mayHoldLiveRecords(tenant: tenant) { Self.milliseconds(self.now()) }
    }

    private static func milliseconds(_ deadline: NIODeadline) -> Int64 {
        Int64(deadline.uptimeNanoseconds / 1_000_000)
    }

    package func remember(_ newRecords: [ResendRecord], on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        let now = self.now()
        let expiry = now + self.window
        for tenant in Set(newRecords.map(\.key.tenant)) {
            self.horizons.extend(tenant: tenant, until: Self.milliseconds(expiry) + 1)
        }
        self.records.withLock { records in
            // Records nobody resends expire; sweep once per window so memory stays bounded.
            if let lastSweep = records.lastSweep, now - lastSweep < self.window {
            } else {
                records.removeExpired(now: now)
            }
            for record in newRecords {
                var key = record.key
                key.deviceToken = ByteBuffer(buffer: key.deviceToken)  // do not pin the read buffer
                records.entries[key, default: []].append(
                    Entry(
                        serial: records.nextSerial,
                        expiry: expiry,
                        outcome: record.outcome,
                        notificationID: record.notificationID
                    )
                )
                records.nextSerial += 1
                records.count += 1
            }
        }
        return eventLoop.makeSucceededVoidFuture()
    }

    package func resolve(
        _ key: ResendRecordKey,
        outcome: NotificationOutcome,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<Void> {
        let waiter: Waiter? = self.records.withLock { records in
            if var list = records.entries[key], let index = list.firstIndex(where: { $0.outcome == nil }) {
                list[index].outcome = outcome
                records.entries[key] = list
                return nil
            }
            guard var waiting = records.waiters[key], !waiting.isEmpty else { return nil }
            let first = waiting.removeFirst()
            records.waiters[key] = waiting.isEmpty ? nil : waiting
            return first
        }
        if let waiter {
            waiter.promise.succeed(ResendClaim(recorded: outcome, firstSentAs: waiter.notificationID))
        }
        return eventLoop.makeSucceededVoidFuture()
    }

    package func claim(_ key: ResendRecordKey, on eventLoop: any EventLoop) -> EventLoopFuture<ResendClaim> {
        let now = self.now()
        enum Claim {
            case none
            case resolved(NotificationOutcome, firstSentAs: ForwardedNotification.ID?)
            case pending(EventLoopPromise<ResendClaim>, serial: UInt64)
        }
        let claim: Claim = self.records.withLock { records in
            guard records.count > 0, var list = records.entries[key] else { return .none }
            let before = list.count
            list.removeAll { $0.expiry < now }
            records.count -= before - list.count
            guard !list.isEmpty else {
                records.entries[key] = nil
                return .none
            }
            let entry = list.removeFirst()
            records.count -= 1
            records.entries[key] = list.isEmpty ? nil : list
            if let outcome = entry.outcome {
                return .resolved(outcome, firstSentAs: entry.notificationID)
            }
            let promise = eventLoop.makePromise(of: ResendClaim.self)
            records.waiters[key, default: []].append(
                Waiter(serial: entry.serial, notificationID: entry.notificationID, promise: promise)
            )
            return .pending(promise, serial: entry.serial)
        }
        switch claim {
        case .none:
            return eventLoop.makeSucceededFuture(.new)
        case .resolved(let outcome, let id):
            return eventLoop.makeSucceededFuture(ResendClaim(recorded: outcome, firstSentAs: id))
        case .pending(let promise, let serial):
            let timeout = eventLoop.scheduleTask(in: self.window) { [self] in
                let expired: Waiter? = self.records.withLock { records in
                    guard var waiting = records.waiters[key],
                        let index = waiting.firstIndex(where: { $0.serial == serial })
                    else {
                        return nil
                    }
                    let waiter = waiting.remove(at: index)
                    records.waiters[key] = waiting.isEmpty ? nil : waiting
                    return waiter
                }
                if let expired {
                    expired.promise.succeed(.outcomeUnknown(firstSentAs: expired.notificationID))
                }
            }
            promise.futureResult.whenComplete { _ in timeout.cancel() }
            return promise.futureResult
        }
    }

    /// Drops expired records now. Claims drop the expired records of their own key, and
    /// ``remember(_:on:)`` sweeps everything once per window, so memory stays bounded when nobody
    /// resends.
    package func removeExpired() {
        let now = self.now()
        self.records.withLock { $0.removeExpired(now: now) }
    }
}

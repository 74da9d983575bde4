import Foundation
import LegacyProtocol
import Synchronization

/// Counts what each tenant does on the legacy interface, in memory, for the migration view
/// (docs/operations.md, "Ending the migration"): notifications by command and outcome, TLS
/// versions, source addresses, provider certificates, feedback polls.
///
/// The hot path only adds to one tenant's counters (``TenantUsageCounters``, taken once per
/// connection at the handshake: one uncontended lock per notification, no clock read, no
/// store). A periodic job calls ``collect()`` and writes the batch to the store; the counts of
/// an interval go to the day the interval ends on (UTC).
public final class UsageRecorder: Sendable {
    /// Minutes kept for the status page's chart of the last hour.
    public static let minutesKept = 60

    private struct State {
        var counters: [String: TenantUsageCounters] = [:]
        /// Each tenant's tally at the last collect.
        var collected: [String: UsageTally] = [:]
        /// Connections and polls since the last collect, and batches put back after a failed
        /// write.
        var pending = UsageBatch()
        /// Per tenant: notifications per minute (the minute's number since 1970 → count).
        var minutes: [String: [Int64: Int64]] = [:]
        /// Per tenant: last seen on the gateway (UNIX seconds), for the gauges.
        var lastSeen: [String: Int64] = [:]
        var lastPoll: [String: Int64] = [:]
    }

    private let state = Mutex(State())
    private let now: @Sendable () -> Date

    public init(now: @escaping @Sendable () -> Date = { Date() }) {
        self.now = now
    }

    private var nowSeconds: Int64 { Int64(self.now().timeIntervalSince1970.rounded(.down)) }

    /// The counters of one tenant, made on first use (at the handshake, not per notification).
    public func counters(tenant: String) -> TenantUsageCounters {
        self.state.withLock { state in
            if let existing = state.counters[tenant] { return existing }
            let made = TenantUsageCounters()
            state.counters[tenant] = made
            return made
        }
    }

    /// A provider connection's handshake completed on the gateway (`poll == false`) or the
    /// feedback port (`poll == true`).
    public func connected(
        tenant: String,
        tlsVersion: String?,
        address: String?,
        certificate: SeenCertificate?,
        feedback: Bool
    ) {
        let time = self.nowSeconds
        let day = UsageDay(unixSeconds: time)
        self.state.withLock { state in
            if !feedback {
                state.pending.saw(tenant, .init(firstSeen: time, lastSeen: time))
                state.lastSeen[tenant] = time
                if let tlsVersion {
                    state.pending.add(1, to: UsageCounter.tls(tlsVersion), tenant: tenant, day: day)
                }
            }
            if let address {
                state.pending.addresses.insert(.init(tenant: tenant, day: day, address: address))
            }
            if let certificate {
                state.pending.saw(certificate, tenant: tenant, at: time)
            }
        }
    }

    /// A feedback poller was served `delivered` tuples.
    public func feedbackPolled(tenant: String, delivered: Int) {
        let time = self.nowSeconds
        let day = UsageDay(unixSeconds: time)
        self.state.withLock { state in
            state.pending.saw(tenant, .init(lastPoll: time))
            state.pending.add(1, to: UsageCounter.feedbackPolls, tenant: tenant, day: day)
            state.pending.add(Int64(delivered), to: UsageCounter.feedbackTuples, tenant: tenant, day: day)
            state.lastPoll[tenant] = time
        }
    }

    /// What happened since the last collect, to write to the store. A tenant whose counts grew
    /// was seen now.
    public func collect() -> UsageBatch {
        let time = self.nowSeconds
        let day = UsageDay(unixSeconds: time)
        let minute = time / 60
        return self.state.withLock { state in
            var batch = state.pending
            state.pending = UsageBatch()
            for (tenant, counters) in state.counters {
                let tally = counters.tally.withLock { $0 }
                let delta = tally.subtracting(state.collected[tenant] ?? UsageTally())
                guard !delta.isZero else { continue }
                state.collected[tenant] = tally
                delta.add(to: &batch, tenant: tenant, day: day)
                batch.saw(tenant, .init(firstSeen: time, lastSeen: time))
                state.lastSeen[tenant] = time
                state.minutes[tenant, default: [:]][minute, default: 0] += delta.notifications
            }
            for (tenant, counts) in state.minutes {
                state.minutes[tenant] = counts.filter { minute - $0.key < Int64(Self.minutesKept) }
            }
            return batch
        }
    }

    /// A batch whose write failed: written again with the next one.
    public func putBack(_ batch: UsageBatch) {
        self.state.withLock { $0.pending.merge(batch) }
    }

    /// Notifications of the last hour, per minute, oldest first (the current minute last), as
    /// far as collected.
    public func lastHour(tenant: String) -> [Int64] {
        let minute = self.nowSeconds / 60
        let counts = self.state.withLock { $0.minutes[tenant] ?? [:] }
        return (0..<Int64(Self.minutesKept)).reversed().map { counts[minute - $0] ?? 0 }
    }

    /// Per tenant, when this process last saw it on the gateway and last served its poller.
    public var recentTimes: [String: UsageBatch.TenantTimes] {
        self.state.withLock { state in
            var times: [String: UsageBatch.TenantTimes] = [:]
            for (tenant, seen) in state.lastSeen { times[tenant, default: .init()].lastSeen = seen }
            for (tenant, poll) in state.lastPoll { times[tenant, default: .init()].lastPoll = poll }
            return times
        }
    }
}

/// A tenant's notification counts since start.
struct UsageTally: Hashable, Sendable {
    var commands: [Int64] = [0, 0, 0]
    var accepted: Int64 = 0
    var broadcast: Int64 = 0
    var unregistered: Int64 = 0
    var dropped: Int64 = 0
    var statuses: [UInt8: Int64] = [:]
    /// Every notification with an outcome.
    var notifications: Int64 = 0

    mutating func count(command: NotificationFrame.Command?, _ outcome: NotificationOutcome, broadcast: Bool) {
        if let command {
            self.commands[Int(command.rawValue)] += 1
        }
        self.notifications += 1
        switch outcome {
        case .accepted:
            if broadcast { self.broadcast += 1 } else { self.accepted += 1 }
        case .unregistered: self.unregistered += 1
        case .dropped: self.dropped += 1
        case .rejected(let status), .gaveUp(let status): self.statuses[status.rawValue, default: 0] += 1
        }
    }

    var isZero: Bool { self.notifications == 0 }

    func subtracting(_ earlier: UsageTally) -> UsageTally {
        var delta = UsageTally()
        delta.commands = zip(self.commands, earlier.commands).map { $0 - $1 }
        delta.accepted = self.accepted - earlier.accepted
        delta.broadcast = self.broadcast - earlier.broadcast
        delta.unregistered = self.unregistered - earlier.unregistered
        delta.dropped = self.dropped - earlier.dropped
        delta.notifications = self.notifications - earlier.notifications
        for (status, count) in self.statuses {
            let change = count - (earlier.statuses[status] ?? 0)
            if change != 0 { delta.statuses[status] = change }
        }
        return delta
    }

    func add(to batch: inout UsageBatch, tenant: String, day: UsageDay) {
        for (command, count) in self.commands.enumerated() {
            batch.add(count, to: UsageCounter.command(UInt8(command)), tenant: tenant, day: day)
        }
        batch.add(self.accepted, to: UsageCounter.accepted, tenant: tenant, day: day)
        batch.add(self.broadcast, to: UsageCounter.broadcast, tenant: tenant, day: day)
        batch.add(self.unregistered, to: UsageCounter.unregistered, tenant: tenant, day: day)
        batch.add(self.dropped, to: UsageCounter.dropped, tenant: tenant, day: day)
        for (status, count) in self.statuses {
            batch.add(count, to: UsageCounter.status(status), tenant: tenant, day: day)
        }
    }
}

/// One tenant's notification counters (shared by its connections on every event loop).
public final class TenantUsageCounters: Sendable {
    let tally = Mutex(UsageTally())

    /// A notification's outcome: `command` is the frame's (nil for a frame too malformed to
    /// say), `broadcast` whether it went to a Live Activity channel.
    public func count(command: NotificationFrame.Command?, _ outcome: NotificationOutcome, broadcast: Bool = false) {
        self.tally.withLock { $0.count(command: command, outcome, broadcast: broadcast) }
    }
}

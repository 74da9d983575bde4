import BridgeCore
import BridgeStores
import CoreMetrics
import Foundation
import Logging

/// The runtime's side of the migration view: writes what the ``UsageRecorder`` collected to the
/// store, and sets the per-tenant gauges the alert rules read from what the store holds (so
/// several instances agree).
final class MigrationView: Sendable {
    /// How often the collected usage is written to the store: one transaction per interval,
    /// whatever the traffic.
    static let writeInterval: Duration = .seconds(10)
    /// How often the per-tenant gauges are read from the store.
    static let gaugeInterval: Duration = .seconds(15)

    let recorder: UsageRecorder
    private let store: any BridgeStore
    private let logger: Logger

    init(recorder: UsageRecorder, store: any BridgeStore, logger: Logger) {
        self.recorder = recorder
        self.store = store
        self.logger = logger
    }

    /// Writes what was collected since the last write; a failed write is put back and tried
    /// again with the next one.
    func write() async {
        let batch = self.recorder.collect()
        guard !batch.isEmpty else { return }
        do {
            try await self.store.recordUsage(batch)
            self.logger.trace("usage written", metadata: ["rows": "\(batch.rowCount)"])
        } catch {
            self.recorder.putBack(batch)
            self.logger.warning(
                "could not write usage to the store; it is kept and written with the next batch",
                metadata: ["error": "\(error)"]
            )
        }
    }

    /// Sets the per-tenant gauges of every tenant the store knows and of `knownTenants` (at
    /// zero until there is a value, so every series exists from the first scrape).
    func updateGauges(knownTenants: [String]) async {
        let usage: StoredUsage
        do {
            usage = try await self.store.usage(from: UsageDay(Date()), tenant: nil).sanitized
        } catch {
            self.logger.warning("could not read usage from the store for the gauges", metadata: ["error": "\(error)"])
            return
        }
        let recent = self.recorder.recentTimes
        for tenant in usage.tenantNames.union(knownTenants).union(recent.keys) {
            var times = usage.tenants[tenant] ?? .init()
            if let seen = recent[tenant] { times.merge(seen) }
            let backlog = usage.backlogs[tenant]
            let expiry = MigrationReport.certificateInUseExpiry(usage.certificates[tenant] ?? [])
            TenantGauges.set(
                tenant: tenant,
                lastSeen: times.lastSeen,
                lastPoll: times.lastPoll,
                pending: backlog?.tokens ?? 0,
                oldestEntry: backlog?.oldestRecorded,
                certificateExpiry: expiry.map { Int64($0.timeIntervalSince1970) }
            )
        }
    }

    /// The report over the last `days` days (the status page), with what this process
    /// collected but has not written yet.
    func report(days: Int, knownTenants: [String]) async throws -> MigrationReport {
        let now = Date()
        let usage = try await self.store.usage(from: UsageDay(number: UsageDay(now).number - days + 1), tenant: nil)
        return MigrationReport(
            usage: usage,
            days: days,
            now: now,
            knownTenants: knownTenants,
            recent: self.recorder.recentTimes
        )
    }
}

/// The per-tenant gauges of the migration view (UNIX seconds; 0: never).
enum TenantGauges {
    static let lastSeen = "apns_bridge_tenant_last_seen_timestamp_seconds"
    static let lastPoll = "apns_bridge_feedback_last_poll_timestamp_seconds"
    static let oldestEntry = "apns_bridge_feedback_oldest_entry_timestamp_seconds"
    static let pending = "apns_bridge_feedback_pending_by_tenant"
    static let certificateExpiry = "apns_bridge_provider_certificate_expiry_timestamp_seconds"

    static func set(
        tenant: String,
        lastSeen: Int64?,
        lastPoll: Int64?,
        pending: Int,
        oldestEntry: Int64?,
        certificateExpiry: Int64?
    ) {
        func gauge(_ label: String) -> CoreMetrics.Gauge {
            CoreMetrics.Gauge(label: label, dimensions: [("tenant", tenant)])
        }
        gauge(Self.lastSeen).record(lastSeen ?? 0)
        gauge(Self.lastPoll).record(lastPoll ?? 0)
        gauge(Self.pending).record(pending)
        gauge(Self.oldestEntry).record(oldestEntry ?? 0)
        gauge(Self.certificateExpiry).record(certificateExpiry ?? 0)
    }
}

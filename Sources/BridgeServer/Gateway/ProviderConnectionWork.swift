import BridgeCore
import Logging
import NIOCore

/// The store writes of one provider connection, once its tenant is known. The machine decides
/// which writes happen and in what order (``ProviderConnectionStateMachine``); this does them:
/// each is the gateway's in-flight work (a graceful shutdown waits for it), and each logs its
/// failure. A failed write completes like a stored one (what follows it must not wait for
/// ever), and each future completes on the connection's event loop.
struct ProviderStoreWrites {
    let tenant: String
    let resendRecords: any ResendRecordStore
    let feedback: any FeedbackRecorder
    let inFlight: InFlightWork
    let metrics: GatewayMetrics
    let logger: Logger

    init(tenant: String, dependencies: GatewayConnectionHandler.Dependencies, logger: Logger) {
        self.tenant = tenant
        self.resendRecords = dependencies.resendRecords
        self.feedback = dependencies.feedback
        self.inFlight = dependencies.inFlight
        self.metrics = dependencies.metrics
        self.logger = logger
    }

    /// Stores a farewell's resend records (docs/protocol.md#resend-records); completes once they
    /// are stored, or could not be.
    func remember(
        _ drafts: [ProviderSessionStateMachine.RecordDraft],
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<Void> {
        guard !drafts.isEmpty else { return eventLoop.makeSucceededVoidFuture() }  // no resend expected
        let records = drafts.map {
            ResendRecord(key: self.key($0), outcome: $0.outcome, notificationID: $0.id)
        }
        let stored = self.resendRecords.remember(records, on: eventLoop)
        self.inFlight.track(stored)
        return stored.hop(to: eventLoop).flatMapError { [logger] error in
            logger.error("could not store resend records; resends may be duplicated", metadata: ["error": "\(error)"])
            return eventLoop.makeSucceededVoidFuture()
        }
    }

    /// Stores the outcomes of notifications that are resend records.
    func resolve(_ drafts: [ProviderSessionStateMachine.RecordDraft], on eventLoop: any EventLoop) {
        for draft in drafts {
            guard let outcome = draft.outcome else { continue }
            let resolved = self.resendRecords.resolve(self.key(draft), outcome: outcome, on: eventLoop)
            self.inFlight.track(resolved)
            resolved.whenFailure { [logger] error in
                logger.error("could not store a resend record's outcome", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Stores a change of the tenant's feedback list; completes once it is stored, or could not be.
    func apply(
        _ write: ProviderConnectionStateMachine.FeedbackWrite,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<Void> {
        let stored = self.feedback.apply(write.change, on: eventLoop)
        self.inFlight.track(stored)
        if case .add(let entry, _) = write {
            let token = LogRedaction.token(entry.deviceToken)
            self.logger.debug("token unregistered upstream", metadata: ["token": "\(token)"])
            stored.whenSuccess { [logger, metrics] in
                metrics.feedbackEntryRecorded()
                logger.debug("feedback entry stored", metadata: ["token": "\(token)"])
            }
        }
        return stored.hop(to: eventLoop).flatMapError { [logger] error in
            logger.error("could not store a feedback change", metadata: ["error": "\(error)"])
            return eventLoop.makeSucceededVoidFuture()
        }
    }

    private func key(_ draft: ProviderSessionStateMachine.RecordDraft) -> ResendRecordKey {
        ResendRecordKey(tenant: self.tenant, frame: draft.frame)
    }
}

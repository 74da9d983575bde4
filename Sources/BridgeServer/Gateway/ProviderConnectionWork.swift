import BridgeCore
import LegacyProtocol
import Logging
import NIOCore

/// What one provider connection starts and may not see finish: the notifications it sends
/// upstream and the store writes their outcomes cause. The machine decides what is sent and
/// which writes happen in what order (``ProviderConnectionStateMachine``); this does them. Each
/// is the gateway's in-flight work (``InFlightWork``: a graceful shutdown waits for it), each
/// store write logs its failure, a failed write completes like a stored one (what follows it
/// must not wait for ever), and every completion comes on the connection's event loop.
///
/// One per connection, used on its event loop only; its tenant is known from the handshake on
/// (frames are forwarded, and outcomes stored, only after it).
final class ProviderConnectionWork {
    private let forwarder: any NotificationForwarder
    private let resendRecords: any ResendRecordStore
    private let feedback: any FeedbackRecorder
    private let inFlight: InFlightWork
    private let metrics: GatewayMetrics
    private let pushLog: PushLog?
    private let logger: Logger
    private var tenant = ""

    init(dependencies: GatewayConnectionHandler.Dependencies, logger: Logger) {
        self.forwarder = dependencies.forwarder
        self.resendRecords = dependencies.resendRecords
        self.feedback = dependencies.feedback
        self.inFlight = dependencies.inFlight
        self.metrics = dependencies.metrics
        self.pushLog = dependencies.pushLog
        self.logger = logger
    }

    /// The tenant is known: reads which of its resend records are live
    /// (docs/protocol.md#resend-records), immediate for a store only this process writes, one
    /// query for a shared one, so that records another instance wrote before this connection
    /// are recognised. Completes on `eventLoop`, read or not.
    func tenantKnown(_ tenant: String, on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        self.tenant = tenant
        return self.resendRecords.refreshLiveRecords(tenant: tenant, on: eventLoop).hop(to: eventLoop)
    }

    // MARK: Sending upstream

    /// Sends the notification of `sequence` upstream, after its resend record's claim when
    /// `claimFirst`, and gives its outcome to `handler` once, on `eventLoop` (`remembered`: a
    /// resend's outcome taken from its record). The notification is in flight until the
    /// handler has dealt with its outcome: that may forward the next frame, so the count never
    /// touches zero while a closed connection still drains.
    func forward(
        _ notification: ForwardedNotification,
        _ sequence: ProviderSessionStateMachine.Sequence,
        claimFirst: Bool,
        on eventLoop: any EventLoop,
        to handler: NIOLoopBound<GatewayConnectionHandler>
    ) {
        self.metrics.notificationReceived()
        self.metrics.forwardStarted()
        self.inFlight.started()
        let inFlight = self.inFlight
        guard !claimFirst else {
            self.forwardUnlessAnswered(notification, on: eventLoop).hop(to: eventLoop).whenSuccess {
                handler.value.outcomeArrived($0.outcome, sequence, remembered: $0.remembered)
                inFlight.finished()
            }
            return
        }
        // A callback, not a future: no promise, future or callback list per notification, and
        // one closure, which keeps no buffer. It comes on the upstream connection's event loop
        // (this one, while its pool has room).
        self.forwarder.send(notification, on: eventLoop) { outcome in
            if eventLoop.inEventLoop {
                handler.value.outcomeArrived(outcome, sequence, remembered: false)
                inFlight.finished()
            } else {
                eventLoop.execute {
                    handler.value.outcomeArrived(outcome, sequence, remembered: false)
                    inFlight.finished()
                }
            }
        }
    }

    /// Claims the notification's resend record, then does the claim's step
    /// (``ResendClaim/step(for:)``, docs/protocol.md#resend-records): the remembered outcome
    /// (`remembered` true), or the notification sent upstream. A remembered outcome is no new
    /// answer: it changes no feedback list and no outcome counter. What is answered here
    /// without APNs goes in the push log; the forwarder logs what it sends.
    private func forwardUnlessAnswered(
        _ notification: ForwardedNotification,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<(outcome: NotificationOutcome, remembered: Bool)> {
        let key = ResendRecordKey(tenant: notification.tenant.name, frame: notification.frame)
        let (forwarder, metrics, pushLog) = (self.forwarder, self.metrics, self.pushLog)
        return self.resendRecords.claim(key, on: eventLoop)
            .flatMap { claim -> EventLoopFuture<(outcome: NotificationOutcome, remembered: Bool)> in
                switch claim.step(for: notification) {
                case .report(let remembered):
                    metrics.resendAnsweredFromRecord()
                    pushLog?.record(notification, outcome: remembered, resendMatched: true)
                    return eventLoop.makeSucceededFuture((remembered, true))
                case .send(let notification, let forwardedAgain):
                    if forwardedAgain { metrics.resendForwardedAgain() }
                    return forwarder.send(notification, on: eventLoop).map { ($0, false) }
                }
            }
            .flatMapErrorThrowing { _ in
                // A store failure: forwarding blindly could duplicate; report status 1 instead
                // (the bridge's own decision, so it is never kept as a record's outcome).
                pushLog?.record(notification, outcome: .gaveUp(.processingError), failure: "resend records unreadable")
                return (.gaveUp(.processingError), false)
            }
    }

    // MARK: Store writes

    /// Stores a farewell's resend records; completes once they are stored, or could not be.
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

    /// Stores what an outcome asks for: a change of the tenant's feedback list, the outcome of
    /// a notification that is a resend record. For a 410, returns its sequence, once its entry
    /// is stored or could not be (the notification is done only then).
    func store(
        _ action: ProviderConnectionStateMachine.OutcomeAction,
        on eventLoop: any EventLoop
    ) -> EventLoopFuture<ProviderSessionStateMachine.Sequence>? {
        var entryStored: EventLoopFuture<ProviderSessionStateMachine.Sequence>?
        if let write = action.feedback {
            let stored = self.apply(write, on: eventLoop)
            if case .add(_, let sequence) = write {
                entryStored = stored.map { sequence }
            }
        }
        if let resolution = action.resolution {
            self.resolve([resolution], on: eventLoop)
        }
        return entryStored
    }

    /// Stores a change of the tenant's feedback list; completes once it is stored, or could not be.
    private func apply(
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

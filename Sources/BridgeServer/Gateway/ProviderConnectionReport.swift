import BridgeCore
import LegacyProtocol
import Logging

/// What an operator sees of one provider connection: its log lines and its counters. The
/// gateway handler reports here what the machine answered; each line says what the action
/// carries (docs/operations.md lists the metrics).
struct ProviderConnectionReport {
    typealias Machine = ProviderConnectionStateMachine

    private(set) var logger: Logger
    private let metrics: GatewayMetrics
    /// The tenant's outcome counters and its usage counters (the migration view), from the handshake on.
    private var outcomes: TenantOutcomeCounters?
    private var usage: TenantUsageCounters?

    init(logger: Logger, metrics: GatewayMetrics) {
        self.logger = logger
        self.metrics = metrics
    }

    mutating func connected(tenant: String, usage: UsageRecorder?) {
        self.logger[metadataKey: "tenant"] = "\(tenant)"
        self.logger.debug("provider connected")
        self.outcomes = self.metrics.outcomes(tenant: tenant)
        self.usage = usage?.counters(tenant: tenant)
    }

    /// The provider's input ended (`gone`: the connection with it) with bytes still to decode.
    func inputEnded(gone: Bool, bufferedBytes: Int) {
        let message: Logger.Message = gone ? "provider connection gone" : "provider closed its side"
        self.logger.debug(message, metadata: ["buffered_bytes": "\(bufferedBytes)"])
    }

    func refused(_ refusal: Machine.Refusal, waiting: Bool) {
        if let error = refusal.malformed {
            self.logger.info("refusing a malformed frame", metadata: ["error": "\(error)"])
        } else {
            self.metrics.notificationReceived()
        }
        if waiting {
            self.logger.debug(
                "notification failed; waiting for earlier ones",
                metadata: ["status": "\(refusal.status)"]
            )
        }
        self.metrics.refused(refusal.status, reason: refusal.malformed == nil ? "local" : "malformed")
        self.outcomes?.count(.rejected(refusal.status))
        self.usage?.count(command: refusal.command, .rejected(refusal.status))
    }

    func partialFrameDropped(bytes: Int) {
        self.logger.info(
            "provider closed the connection in the middle of a frame; that frame is not forwarded",
            metadata: ["bytes": "\(bytes)"]
        )
        self.metrics.partialFrameDropped()
    }

    /// `action` says what the outcome counts as; `remembered`: a resend's outcome taken from its
    /// record, counted at its first answer.
    func outcome(
        _ outcome: NotificationOutcome,
        _ action: ProviderConnectionStateMachine.OutcomeAction,
        remembered: Bool
    ) {
        self.metrics.forwardFinished()
        if !remembered {
            self.outcomes?.count(outcome)
        }
        self.usage?.count(command: action.command, outcome, broadcast: action.broadcast)
    }

    func farewell(_ farewell: ProviderSessionStateMachine.Farewell) {
        if farewell.status == .shutdown {
            self.logger.info(
                "closing provider connection for shutdown",
                metadata: ["packet": "\(Self.packet(farewell))"]
            )
        } else {
            self.logger.info(
                "notification failed; closing provider connection",
                metadata: [
                    "status": "\(farewell.status)", "packet": "\(Self.packet(farewell))",
                    "resend_records": "\(farewell.resendRecords.count)",
                ]
            )
        }
    }

    /// A farewell decided after the connection was gone. A shutdown's lost nothing.
    func unannounced(_ farewell: ProviderSessionStateMachine.Farewell) {
        guard farewell.status != .shutdown else { return }
        self.metrics.failureAfterClose()
        self.logger.warning(
            "notification failed after the provider closed its connection; nobody to tell",
            metadata: ["status": "\(farewell.status)", "packet": "\(Self.packet(farewell))"]
        )
    }

    /// The shutdown's bound passed before the farewell's resend records were stored
    /// (docs/protocol.md#shutdown).
    func deliveredBeforeRecordsStored() {
        self.metrics.farewellBeforeRecords()
        self.logger.warning(
            "the shutdown's bound passed: the farewell goes out before its resend records are stored; an immediate resend may be forwarded twice"
        )
    }

    func errorResponseSent(_ packet: ErrorResponsePacket) {
        self.metrics.errorResponseSent(packet.status)
    }

    func closing(_ reason: Machine.CloseReason, closeNotifyWaitSeconds: Double) {
        switch reason {
        case .drained:
            self.logger.debug("provider input read to its end and every notification answered; closing")
        case .idle:
            self.logger.debug("closing idle provider connection")
        case .beforeForwarding:
            self.logger.debug("closing provider connection before anything was forwarded")
        case .inputEnded:
            break
        case .providerDidNotClose(let bytesDropped):
            // How an operator recognises a provider that only writes (docs/protocol.md#closing).
            self.logger.info(
                "the provider did not close after its farewell; closing the connection",
                metadata: [
                    "bytes_dropped": "\(bytesDropped)", "close_notify_wait_seconds": "\(closeNotifyWaitSeconds)",
                ]
            )
        }
    }

    func tenantReviewed(_ review: Machine.TenantReview) {
        switch review {
        case .unchanged:
            break
        case .channelsChanged(let channels):
            self.logger.info(
                "the reloaded configuration changed this tenant's channels",
                metadata: ["channels": "\(channels.count)"]
            )
        case .removed(let tenantResolves, let credentialsRemain, _):
            self.logger.notice(
                "the reloaded configuration removed this connection's tenant or its credentials; closing it with status 10",
                metadata: ["tenant_resolves": "\(tenantResolves)", "credentials_remain": "\(credentialsRemain)"]
            )
        }
    }

    private static func packet(_ farewell: ProviderSessionStateMachine.Farewell) -> String {
        farewell.packet.map { "\($0)" } ?? "none (command 0)"
    }
}

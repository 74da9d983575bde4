import BridgeCore
import NIOCore

extension GatewayConnectionHandler {
    /// What a provider connection works with, shared by every connection of the gateway.
    package struct Dependencies: Sendable {
        var forwarder: any NotificationForwarder
        var resendRecords: any ResendRecordStore
        var feedback: any FeedbackRecorder
        var tenantResolver: any TenantResolver
        /// The gateway's unfinished work, which graceful shutdown waits for.
        var inFlight: InFlightWork
        /// The migration view's counts (`nil`: not kept).
        var usage: UsageRecorder?
        var metrics: GatewayMetrics
        /// Where a notification answered without APNs (from its resend record) is kept; the
        /// forwarder keeps the rest (`nil`: the push log is off).
        var pushLog: PushLog?
        /// The listener's close-notify wait as last loaded (`tls.closeNotifyWaitSeconds`, live on
        /// reload), for tenants without one of their own (docs/protocol.md#closing).
        var closeNotifyWait: @Sendable () -> TimeAmount

        package init(
            forwarder: any NotificationForwarder,
            resendRecords: any ResendRecordStore,
            feedback: any FeedbackRecorder,
            tenantResolver: any TenantResolver,
            inFlight: InFlightWork,
            usage: UsageRecorder? = nil,
            metrics: GatewayMetrics,
            pushLog: PushLog? = nil,
            closeNotifyWait: @escaping @Sendable () -> TimeAmount
        ) {
            self.forwarder = forwarder
            self.resendRecords = resendRecords
            self.feedback = feedback
            self.tenantResolver = tenantResolver
            self.inFlight = inFlight
            self.usage = usage
            self.metrics = metrics
            self.pushLog = pushLog
            self.closeNotifyWait = closeNotifyWait
        }
    }
}

import BridgeCore

extension GatewayConnectionHandler {
    /// What a provider connection works with, shared by every connection of the gateway.
    package struct Dependencies: Sendable {
        var upstream: any NotificationUpstream
        var resendRecords: any ResendRecordStore
        var feedback: any FeedbackRecorder
        var tenantResolver: any TenantResolver
        /// The gateway's unfinished work, which graceful shutdown waits for.
        var inFlight: InFlightWork
        /// The migration view's counts (`nil`: not kept).
        var usage: UsageRecorder?
        var metrics: GatewayMetrics

        package init(
            upstream: any NotificationUpstream,
            resendRecords: any ResendRecordStore,
            feedback: any FeedbackRecorder,
            tenantResolver: any TenantResolver,
            inFlight: InFlightWork,
            usage: UsageRecorder? = nil,
            metrics: GatewayMetrics
        ) {
            self.upstream = upstream
            self.resendRecords = resendRecords
            self.feedback = feedback
            self.tenantResolver = tenantResolver
            self.inFlight = inFlight
            self.usage = usage
            self.metrics = metrics
        }
    }
}

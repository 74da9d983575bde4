import NIOCore

extension NotificationFrame {
    /// The local checks of docs/protocol.md#status-codes, in the order listed there: token, topic,
    /// payload. Returns `nil` for a frame that may be forwarded.
    ///
    /// - Parameters:
    ///   - hasTopic: whether a topic could be resolved for the connection's tenant.
    ///   - maximumPayloadLength: 4096, or 5120 for a VoIP topic.
    public func validationFailure(hasTopic: Bool, maximumPayloadLength: Int) -> ErrorResponseStatus? {
        let tokenLength = self.deviceToken.readableBytes
        if tokenLength == 0 {
            return .missingDeviceToken
        }
        if tokenLength < LegacyProtocolLimits.minimumTokenLength
            || tokenLength > LegacyProtocolLimits.maximumTokenLength
        {
            return .invalidTokenSize
        }
        if !hasTopic {
            return .missingTopic
        }
        let payloadLength = self.payload.readableBytes
        if payloadLength == 0 {
            return .missingPayload
        }
        if payloadLength > maximumPayloadLength {
            return .invalidPayloadSize
        }
        return nil
    }
}

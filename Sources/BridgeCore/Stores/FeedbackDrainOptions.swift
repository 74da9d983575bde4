import LegacyProtocol

/// How one poller of the feedback service is served.
public struct FeedbackDrainOptions: Hashable, Sendable {
    /// Entries read from the store and written to the poller at a time.
    public var batchSize: Int = 1000
    /// For clients that assume 38-byte tuples: tokens that are not 32 bytes are left out (and
    /// stay pending until retention removes them).
    public var only32ByteTokens = false

    public init(batchSize: Int = 1000, only32ByteTokens: Bool = false) {
        self.batchSize = batchSize
        self.only32ByteTokens = only32ByteTokens
    }
}

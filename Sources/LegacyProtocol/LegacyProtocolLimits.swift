/// The named limits of the legacy binary interface.
///
/// Every length field read from the wire is compared with one of these before the bytes it
/// announces are waited for or allocated (docs/protocol.md#status-codes).
public enum LegacyProtocolLimits {
    /// Device tokens: 32 bytes is the classic size; Apple calls tokens variable length, so up to
    /// 100 bytes are accepted.
    public static let minimumTokenLength = 32
    public static let maximumTokenLength = 100

    /// Largest payload for ordinary topics.
    public static let maximumPayloadLength = 4096
    /// Largest payload for VoIP topics (`*.voip`).
    public static let maximumVoIPPayloadLength = 5120
    /// The largest payload any topic or channel accepts: a command-0 or command-1 frame that
    /// announces more is refused on its length field (status 7).
    public static let largestAcceptedPayloadLength = max(maximumPayloadLength, maximumVoIPPayloadLength)

    /// Item header: 1 byte item id + 2 bytes item length.
    public static let itemHeaderLength = 3

    /// The largest command-2 frame that well-formed items can make: a token item of the longest
    /// accepted token, a payload item of the largest length a 16-bit field can announce, and the
    /// identifier, expiration and priority items. A larger frame length is refused on its 5 header
    /// bytes; anything up to this is read so that an oversized payload is reported as status 7.
    public static let maximumFrameLength =
        (itemHeaderLength + maximumTokenLength)
        + (itemHeaderLength + Int(UInt16.max))
        + (itemHeaderLength + 4)
        + (itemHeaderLength + 4)
        + (itemHeaderLength + 1)
}

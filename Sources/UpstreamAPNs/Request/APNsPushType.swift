import NIOCore

/// The `apns-push-type` header. The legacy interface had no such field, so the bridge infers it
/// from the tenant's topic and the payload (docs/upstream.md#requests).
public struct APNsPushType: Hashable, Sendable, CustomStringConvertible {
    public var rawValue: String

    public init(_ rawValue: String) {
        self.rawValue = rawValue
    }

    public var description: String { self.rawValue }

    public static let alert = APNsPushType("alert")
    public static let background = APNsPushType("background")
    public static let voip = APNsPushType("voip")
    public static let complication = APNsPushType("complication")
    public static let fileprovider = APNsPushType("fileprovider")
    public static let liveactivity = APNsPushType("liveactivity")
    public static let location = APNsPushType("location")
    public static let mdm = APNsPushType("mdm")
    public static let pushtotalk = APNsPushType("pushtotalk")
    public static let widgets = APNsPushType("widgets")

    /// Every value Apple documents, for validation in the mock server.
    public static let documented: Set<APNsPushType> = [
        .alert, .background, .voip, .complication, .fileprovider, .liveactivity, .location, .mdm,
        .pushtotalk, .widgets,
    ]

    /// Infers the push type: from the topic's suffix first, then from the payload (an `aps`
    /// dictionary holding nothing but `content-available` is a background notification).
    public static func infer(topic: String?, payload: ByteBuffer) -> APNsPushType {
        if let topic {
            if topic.hasSuffix(".voip") { return .voip }
            if topic.hasSuffix(".complication") { return .complication }
            if topic.hasSuffix(".pushkit.fileprovider") { return .fileprovider }
            if topic.hasSuffix(".push-type.liveactivity") { return .liveactivity }
        }
        return BackgroundPayloadDetector.isBackgroundOnly(payload) ? .background : .alert
    }
}

/// Decides whether a payload's `aps` dictionary holds only `content-available`.
///
/// Most payloads do not contain the bytes `content-available` at all, and those are answered
/// by one scan without parsing. Only the rest are parsed as JSON.
enum BackgroundPayloadDetector {
    private static let marker = Array("content-available".utf8)

    static func isBackgroundOnly(_ payload: ByteBuffer) -> Bool {
        let mentionsMarker = payload.withUnsafeReadableBytes { bytes -> Bool in
            guard bytes.count >= marker.count else { return false }
            var index = 0
            let last = bytes.count - marker.count
            while index <= last {
                if bytes[index] == marker[0] {
                    var matched = true
                    for offset in 1..<marker.count where bytes[index + offset] != marker[offset] {
                        matched = false
                        break
                    }
                    if matched { return true }
                }
                index += 1
            }
            return false
        }
        guard mentionsMarker else { return false }
        guard let keys = JSONScanner.apsKeys(payload) else { return false }
        return keys == ["content-available"]
    }
}

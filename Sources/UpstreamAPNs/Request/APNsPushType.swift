import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

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
        if let topic, let pushType = Self.topicSuffixes.first(where: { topic.utf8.hasSuffix($0.suffix) })?.pushType {
            return pushType
        }
        return BackgroundPayloadDetector.isBackgroundOnly(payload) ? .background : .alert
    }

    /// The topic suffixes that name a push type, compared as bytes (a `String` comparison would
    /// compare characters, for every notification).
    private static let topicSuffixes: [(suffix: [UInt8], pushType: APNsPushType)] = [
        (Array(".voip".utf8), .voip), (Array(".complication".utf8), .complication),
        (Array(".pushkit.fileprovider".utf8), .fileprovider), (Array(".push-type.liveactivity".utf8), .liveactivity),
    ]
}

extension String.UTF8View {
    fileprivate func hasSuffix(_ suffix: [UInt8]) -> Bool {
        self.count >= suffix.count && self.suffix(suffix.count).elementsEqual(suffix)
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
            // memchr finds each candidate first byte (vectorised in libc), memcmp the rest.
            return marker.withUnsafeBytes { marker in
                let base = bytes.baseAddress!
                let last = bytes.count - marker.count
                var index = 0
                while index <= last, let found = memchr(base + index, Int32(marker[0]), last - index + 1) {
                    if memcmp(found, marker.baseAddress!, marker.count) == 0 { return true }
                    index = base.distance(to: UnsafeRawPointer(found)) + 1
                }
                return false
            }
        }
        guard mentionsMarker else { return false }
        guard let keys = JSONScanner.apsKeys(payload) else { return false }
        return keys == ["content-available"]
    }
}

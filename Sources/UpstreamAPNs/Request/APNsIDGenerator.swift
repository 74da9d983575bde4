import Synchronization

/// Makes an `apns-id` for every notification: a UUID (version 4 layout, lowercase) that is unique
/// per bridge process and cheap.
///
/// An `apns-id` only has to be unique, not secret. Foundation's `UUID()` reads `/dev/urandom`
/// on every call on Linux, which is too slow for one id per notification, so the upper 64 bits
/// are random once per generator and the lower 62 bits count.
///
/// ```
///  random prefix (60 bits + version 4)   |  variant 10  |  counter (62 bits)
/// xxxxxxxx-xxxx-4xxx-                     [89ab]xxx-xxxxxxxxxxxx
/// ```
public final class APNsIDGenerator: Sendable {
    private let prefix: UInt64
    private let counter = Atomic<UInt64>(0)

    public convenience init() {
        var generator = SystemRandomNumberGenerator()
        self.init(prefix: generator.next())
    }

    init(prefix: UInt64) {
        // Version 4 in bits 12–15 of the third group.
        self.prefix = (prefix & ~0x0000_0000_0000_F000) | 0x0000_0000_0000_4000
    }

    public func next() -> String {
        self.nextID().description
    }

    /// The next id as its two halves: written as text only where it is sent or logged (an
    /// `apns-id` as a `String` was an allocation per notification).
    public func nextID() -> APNsRequestID {
        let count = self.counter.wrappingAdd(1, ordering: .relaxed).newValue
        let low = (count & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
        return APNsRequestID(high: self.prefix, low: low)
    }
}

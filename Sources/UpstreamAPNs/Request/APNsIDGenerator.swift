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
        let count = self.counter.wrappingAdd(1, ordering: .relaxed).newValue
        let low = (count & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
        return Self.format(high: self.prefix, low: low)
    }

    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    static func format(high: UInt64, low: UInt64) -> String {
        String(unsafeUninitializedCapacity: 36) { buffer in
            var position = 0
            func put(_ value: UInt64, nibbles: Int) {
                var shift = (nibbles - 1) * 4
                while shift >= 0 {
                    buffer[position] = Self.digits[Int((value >> UInt64(shift)) & 0xF)]
                    position += 1
                    shift -= 4
                }
            }
            func dash() {
                buffer[position] = UInt8(ascii: "-")
                position += 1
            }
            put(high >> 32, nibbles: 8)
            dash()
            put(high >> 16, nibbles: 4)
            dash()
            put(high, nibbles: 4)
            dash()
            put(low >> 48, nibbles: 4)
            dash()
            put(low, nibbles: 12)
            return position
        }
    }
}

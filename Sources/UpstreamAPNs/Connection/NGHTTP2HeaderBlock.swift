#if NGHTTP2Engine
import CNghttp2
import NIOHPACK

/// One request's header block as libnghttp2 takes it: an array of name/value pairs
/// (`nghttp2_nv`) that `nghttp2_submit_request` copies. The constant names and values (the
/// encoder's `StaticString`s) are pointed at where they lie; the other values are written into
/// one buffer this block keeps. Its memory is reused from request to request, so building a
/// block allocates nothing once the buffer has grown to the largest block seen.
///
/// A value type over memory it owns: the ``NGHTTP2ConnectionHandler`` keeps one, copies it into
/// a local for a request (a class's stored property written field by field costs a dynamic
/// exclusivity check per access; a local does not) and frees it when it is released.
struct NGHTTP2HeaderBlock {
    /// Room for more fields than a request has (a device request or a broadcast has 11 with an
    /// authorization).
    static let capacity = 16

    private(set) var fields: UnsafeMutablePointer<nghttp2_nv>
    private(set) var count = 0
    private var bytes: UnsafeMutableRawBufferPointer
    private var used = 0

    init(byteCapacity: Int = 1024) {
        self.fields = .allocate(capacity: Self.capacity)
        self.bytes = .allocate(byteCount: byteCapacity, alignment: 1)
    }

    /// Frees the memory; the block is not used again.
    func deallocate() {
        self.fields.deallocate()
        self.bytes.deallocate()
    }

    /// Empties the block for the next request; the memory stays.
    mutating func removeAll() {
        self.count = 0
        self.used = 0
    }

    /// Appends one field. `indexing` is the encoder's; nghttp2's flags say less: without flags,
    /// nghttp2 indexes a field itself, except `:path` and `content-length`, which it sends as
    /// literals without indexing (what `.nonIndexable` asks). For any other name `NO_INDEX`
    /// (never indexed, the same size as "without indexing") keeps a value out of the table, as
    /// Apple asks for each request's id.
    mutating func append(name: StaticString, value: APNsHeaderValue, indexing: HPACKIndexing) {
        precondition(self.count < Self.capacity, "more header fields than a request has")
        let literalByDefault =
            indexing == .nonIndexable && (Self.equal(name, ":path") || Self.equal(name, "content-length"))
        let flags =
            indexing == .indexable || literalByDefault
            ? UInt8(NGHTTP2_NV_FLAG_NONE.rawValue) : UInt8(NGHTTP2_NV_FLAG_NO_INDEX.rawValue)
        let valueStart: UnsafeMutablePointer<UInt8>
        let valueLength: Int
        if case .literal(let literal) = value {
            valueStart = UnsafeMutablePointer(mutating: literal.utf8Start)
            valueLength = literal.utf8CodeUnitCount
        } else {
            let length = value.byteCount
            self.reserve(length)
            let start = self.bytes.baseAddress! + self.used
            valueLength = value.write(into: UnsafeMutableRawBufferPointer(start: start, count: length))
            valueStart = start.assumingMemoryBound(to: UInt8.self)
            self.used += valueLength
        }
        self.fields[self.count] = nghttp2_nv(
            name: UnsafeMutablePointer(mutating: name.utf8Start),
            value: valueStart,
            namelen: name.utf8CodeUnitCount,
            valuelen: valueLength,
            flags: flags
        )
        self.count += 1
    }

    /// Room for `length` more bytes; a larger buffer moves the values written so far, and the
    /// fields that point at them follow.
    private mutating func reserve(_ length: Int) {
        guard self.used + length > self.bytes.count else { return }
        let old = self.bytes
        let larger = UnsafeMutableRawBufferPointer.allocate(
            byteCount: max(2 * old.count, self.used + length),
            alignment: 1
        )
        larger.baseAddress!.copyMemory(from: old.baseAddress!, byteCount: self.used)
        let oldStart = UnsafeMutableRawPointer(old.baseAddress!)
        for index in 0..<self.count {
            let value = UnsafeMutableRawPointer(self.fields[index].value!)
            if value >= oldStart && value < oldStart + old.count {
                self.fields[index].value = (larger.baseAddress! + (value - oldStart)).assumingMemoryBound(
                    to: UInt8.self
                )
            }
        }
        old.deallocate()
        self.bytes = larger
    }

    private static func equal(_ name: StaticString, _ other: StaticString) -> Bool {
        UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
            .elementsEqual(UnsafeRawBufferPointer(start: other.utf8Start, count: other.utf8CodeUnitCount))
    }
}
#endif

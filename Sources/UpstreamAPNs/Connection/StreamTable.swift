/// The open streams of one connection, by stream id, oldest first.
///
/// A client opens its streams in the order of their ids, and APNs answers them in about that
/// order. So the table is two arrays in id order (ids, and values), appended to: the stream
/// answered is almost always the first one (else it is found by binary search), and a removed
/// stream leaves an empty slot that is dropped once the slots before it are empty too, or when
/// empty slots outnumber the streams. Values are changed and taken out in place, never copied.
/// NIOHTTP2 keeps its streams in id order for the same reason. A `Dictionary` hashed the id
/// with SipHash at every insertion, lookup and removal (docs/performance-log.md, "Read buffers,
/// stream tables and pool scans").
package struct StreamTable<ID: Comparable, Value> {
    /// The slots' ids, increasing.
    private var ids: [ID] = []
    /// The slots' streams; `nil` for a removed one.
    private var values: [Value?] = []
    /// The first slot in use (the slots before it are empty); `ids.count` when none is.
    private var head = 0
    /// The highest id ever added (kept after its stream is removed: ids are not reused).
    private var highestID: ID?

    /// Where a stream is: valid until the table changes.
    package struct Index {
        fileprivate var slot: Int
    }

    package private(set) var count = 0
    package var isEmpty: Bool { self.count == 0 }

    package init() {}

    /// Adds a stream; its id must be above every id added before (ids only grow).
    package mutating func append(_ id: ID, _ value: consuming Value) {
        if let highestID = self.highestID {
            precondition(highestID < id, "stream ids are added in increasing order")
        }
        self.highestID = id
        self.ids.append(id)
        self.values.append(value)
        self.count += 1
    }

    /// Where the stream `id` is, if it is open.
    package func index(of id: ID) -> Index? {
        guard self.count > 0 else { return nil }
        let firstID = self.ids[self.head]
        if firstID == id { return Index(slot: self.head) }  // the first slot is in use
        guard firstID < id, id <= self.ids[self.ids.count - 1] else { return nil }
        var low = self.head + 1
        var high = self.ids.count - 1
        while low <= high {
            let middle = (low + high) / 2
            let candidate = self.ids[middle]
            if candidate == id {
                return self.values[middle] == nil ? nil : Index(slot: middle)
            }
            if candidate < id { low = middle + 1 } else { high = middle - 1 }
        }
        return nil
    }

    package subscript(index: Index) -> Value {
        get { self.values[index.slot]! }
        _modify { yield &self.values[index.slot]! }
    }

    /// Removes the stream at `index` (found by ``index(of:)``, with no change since).
    package mutating func remove(at index: Index) -> Value {
        let value = self.take(slot: index.slot)
        self.dropEmptySlots()
        return value
    }

    /// Removes the stream `id`, if it is open.
    @discardableResult
    package mutating func removeValue(forID id: ID) -> Value? {
        guard let index = self.index(of: id) else { return nil }
        return self.remove(at: index)
    }

    /// Removes the streams `predicate` accepts, and returns them, oldest first.
    package mutating func removeAll(where predicate: (ID, Value) -> Bool) -> [(id: ID, value: Value)] {
        var removed: [(id: ID, value: Value)] = []
        for slot in self.head..<self.ids.count {
            guard let value = self.values[slot], predicate(self.ids[slot], value) else { continue }
            removed.append((self.ids[slot], self.take(slot: slot)))
        }
        self.dropEmptySlots()
        return removed
    }

    /// Removes every stream, and returns them, oldest first.
    @discardableResult
    package mutating func removeAll() -> [(id: ID, value: Value)] {
        self.removeAll(where: { _, _ in true })
    }

    /// Moves a stream out of its slot, leaving the slot empty.
    private mutating func take(slot: Int) -> Value {
        var taken: Value? = nil
        swap(&taken, &self.values[slot])
        self.count -= 1
        return taken!
    }

    /// Moves `head` past empty slots, and gives back the empty slots' memory once they are half
    /// of the table or more.
    private mutating func dropEmptySlots() {
        while self.head < self.ids.count, self.values[self.head] == nil {
            self.head += 1
        }
        if self.count == 0 {
            self.ids.removeAll(keepingCapacity: true)
            self.values.removeAll(keepingCapacity: true)
            self.head = 0
        } else if self.ids.count >= 32, self.ids.count - self.count >= self.ids.count / 2 {
            // Amortised: at least half the slots go, so each slot is moved at most once per
            // time the table doubles.
            var ids: [ID] = []
            var values: [Value?] = []
            ids.reserveCapacity(self.count * 2)
            values.reserveCapacity(self.count * 2)
            for slot in self.head..<self.ids.count where self.values[slot] != nil {
                var taken: Value? = nil
                swap(&taken, &self.values[slot])
                ids.append(self.ids[slot])
                values.append(taken)
            }
            self.ids = ids
            self.values = values
            self.head = 0
        }
    }
}

import Testing
import UpstreamAPNs

/// The connection's table of open streams, against a `Dictionary` doing the same operations.
@Suite("Stream table")
struct StreamTableTests {
    @Test("Found at the front, in the middle and not at all; removed in any order; the order kept")
    func basics() {
        var table = StreamTable<Int32, String>()
        #expect(table.isEmpty)
        #expect(table.index(of: 1) == nil)
        for id in stride(from: Int32(1), through: 11, by: 2) {
            table.append(id, "stream \(id)")
        }
        #expect(table.count == 6)
        #expect(table.index(of: 1).map { table[$0] } == "stream 1")
        #expect(table.index(of: 7).map { table[$0] } == "stream 7")
        #expect(table.index(of: 11).map { table[$0] } == "stream 11")
        #expect(table.index(of: 4) == nil, "between two ids")
        #expect(table.index(of: 13) == nil, "above the last")
        #expect(table.removeValue(forID: 7) == "stream 7")
        #expect(table.index(of: 7) == nil)
        #expect(table.removeValue(forID: 1) == "stream 1")
        #expect(table.index(of: 1) == nil, "below the first")
        if let index = table.index(of: 9) {
            table[index] += " answered"
        }
        let late = table.removeAll(where: { id, _ in id > 5 })
        #expect(late.map(\.id) == [9, 11])
        #expect(late.map(\.value) == ["stream 9 answered", "stream 11"])
        #expect(table.removeAll(where: { _, _ in false }).isEmpty)
        table.append(13, "stream 13")
        #expect(table.removeAll().map(\.id) == [3, 5, 13])
        #expect(table.isEmpty)
    }

    @Test("A seeded mix of openings, answers in any order, lookups and sweeps agrees with a Dictionary")
    func agreesWithDictionary() {
        var generator = RequestRetryStateMachineTests.SeededGenerator(state: 38)
        var table = StreamTable<Int32, Int>()
        var reference: [Int32: Int] = [:]
        var nextID: Int32 = 1
        for step in 0..<20_000 {
            switch Int.random(in: 0..<10, using: &generator) {
            case 0..<4:
                table.append(nextID, step)
                reference[nextID] = step
                nextID += 2 * Int32.random(in: 1...2, using: &generator)  // ids may be skipped
            case 4..<6 where !reference.isEmpty:
                // Mostly the oldest (answers come in about the order sent), sometimes any.
                let oldest = Bool.random(using: &generator)
                let id = oldest ? reference.keys.min()! : reference.keys.randomElement(using: &generator)!
                #expect(table.removeValue(forID: id) == reference.removeValue(forKey: id))
            case 6..<9:
                let id = Int32.random(in: 0...(nextID + 2), using: &generator)
                #expect(table.index(of: id).map { table[$0] } == reference[id], "id \(id)")
            default:
                let limit = step - Int.random(in: 0..<500, using: &generator)
                let swept = table.removeAll(where: { _, opened in opened < limit })
                let expected = reference.filter { $0.value < limit }.keys.sorted()
                #expect(swept.map(\.id) == expected)
                for id in expected { reference.removeValue(forKey: id) }
            }
            #expect(table.count == reference.count)
        }
        #expect(table.removeAll().map(\.id) == reference.keys.sorted())
    }
}

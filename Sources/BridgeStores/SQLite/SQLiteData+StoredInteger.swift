import SQLiteNIO

extension SQLiteData {
    /// An integer column's value, read without trapping.
    ///
    /// SQLite keeps a number it cannot store as a 64-bit integer (an overflowing `value + 1`,
    /// or `1e19` written by hand) as REAL, even in an INTEGER column, and SQLiteNIO's
    /// ``integer`` converts REAL with `Int64(_:)`, which traps out of range. Here a REAL is
    /// clamped to `Int` (NaN is no value), text is parsed, and blob or NULL is no value: the
    /// callers treat a missing number as they treat a missing column. Read a row's columns with
    /// ``SQLiteRow/storedInteger(_:corrupt:)``, which also counts what is no number at all.
    /// (docs/operations.md#store-values)
    var storedInteger: Int? {
        switch self {
        case .integer(let value): return value
        case .float(let value):
            guard !value.isNaN else { return nil }
            if value >= 0x1p63 { return .max }
            if value < -0x1p63 { return .min }
            return Int(value)
        case .text(let text): return Int(text)
        case .blob, .null: return nil
        }
    }
}

extension SQLiteRow {
    /// The integer in `column` (``SQLiteData/storedInteger``), or `nil` when there is none. A
    /// value that is there but no number (text that does not parse, a blob, NaN) is reported to
    /// `corrupt` as well.
    func storedInteger(_ column: String, corrupt: CorruptValues) -> Int? {
        guard let data = self.column(column) else { return nil }
        if let value = data.storedInteger { return value }
        switch data {
        case .text: corrupt.read(column: column, type: "text")
        case .blob: corrupt.read(column: column, type: "blob")
        case .float: corrupt.read(column: column, type: "real (NaN)")
        case .integer, .null: break
        }
        return nil
    }
}

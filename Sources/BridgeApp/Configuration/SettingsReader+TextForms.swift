// The text forms a value must have before it is parsed: numbers and `HOST:PORT` addresses.

extension SettingsReader {
    /// Plain decimal: digits, with a leading `-` and (for `fraction`) one `.` between digits.
    /// Not `+5`, ` 5`, `0x3c` or `1e3`, which Swift's own parsers take (`0x3c` as 60).
    static func isPlainDecimal<Text: StringProtocol>(_ text: Text, fraction: Bool) -> Bool {
        var unsigned = text.utf8[...]
        if unsigned.first == UInt8(ascii: "-") { unsigned = unsigned.dropFirst() }
        let parts = unsigned.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard (1...(fraction ? 2 : 1)).contains(parts.count) else { return false }
        return parts.allSatisfy { part in
            !part.isEmpty && part.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
        }
    }

    package static func parseAddress(_ text: String) -> (host: String, port: Int)? {
        guard let colon = text.lastIndex(of: ":"),
            Self.isPlainDecimal(text[text.index(after: colon)...], fraction: false),
            let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port)
        else {
            return nil
        }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        return (host, port)
    }
}

import NIOCore

/// Reads a PROXY protocol header (version 1 or 2) from the start of a connection's bytes,
/// without I/O: the listener feeds it what arrived until it answers a header or an error.
///
/// Every length is checked before anything waits for it: version 1 is at most 107 bytes by its
/// definition; version 2 announces its length in 2 bytes, refused above
/// ``maximumVersion2Length``, so a peer can make the listener hold at most that much.
package enum ProxyHeaderParser {
    /// Version 1's longest line, CRLF included (the PROXY protocol's own bound).
    package static let maximumVersion1Length = 107
    /// The longest version 2 header accepted: the 16 fixed bytes and an address block of up to
    /// 1,024 bytes (the largest address, two UNIX paths, is 216; the rest leaves room for TLVs
    /// such as HAProxy's `unique-id`, which are skipped).
    package static let maximumVersion2Length = 16 + 1024

    static let version2Signature: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A]
    static let version1Prefix: [UInt8] = Array("PROXY ".utf8)

    /// A header read from the front of `buffer` (its bytes consumed), or `nil` when more bytes
    /// are needed (nothing consumed).
    ///
    /// - Throws: ``ProxyHeaderError`` as soon as the bytes so far cannot start a valid header.
    package static func parse(_ buffer: inout ByteBuffer) throws(ProxyHeaderError) -> ProxyHeader? {
        let available = buffer.readableBytesView
        guard let first = available.first else { return nil }
        // Decide the version from as many bytes as have come, refusing as early as they allow.
        let signature: [UInt8] = first == 0x0D ? Self.version2Signature : Self.version1Prefix
        let compared = min(available.count, signature.count)
        guard available.prefix(compared).elementsEqual(signature.prefix(compared)) else { throw .missing }
        if first == 0x0D {
            guard available.count >= 16 else { return nil }
            return try Self.parseVersion2(&buffer)
        }
        guard available.count > signature.count else { return nil }
        return try Self.parseVersion1(&buffer)
    }

    // MARK: Version 1

    private static func parseVersion1(_ buffer: inout ByteBuffer) throws(ProxyHeaderError) -> ProxyHeader? {
        let view = buffer.readableBytesView
        let searched = view.prefix(Self.maximumVersion1Length)
        guard let lf = searched.firstIndex(of: 0x0A) else {
            if view.count >= Self.maximumVersion1Length {
                throw .malformedVersion1("no CRLF within \(Self.maximumVersion1Length) bytes")
            }
            return nil
        }
        let lineEnd = lf - view.startIndex
        guard lineEnd >= 1, view[lf - 1] == 0x0D else { throw .malformedVersion1("a line that does not end in CRLF") }
        guard let line = buffer.getString(at: buffer.readerIndex, length: lineEnd - 1) else {
            throw .malformedVersion1("a line that is not text")
        }
        let fields = line.split(separator: " ", omittingEmptySubsequences: false)
        guard fields.count >= 2, fields[0] == "PROXY" else { throw .malformedVersion1("no PROXY keyword") }
        let header: ProxyHeader
        switch fields[1] {
        case "UNKNOWN":
            // Whatever follows is ignored, as the protocol says.
            header = ProxyHeader(version: .one, source: nil)
        case "TCP4", "TCP6":
            guard fields.count == 6 else { throw .malformedVersion1("\(fields.count) fields, not 6") }
            guard let port = Self.port(fields[4]), Self.port(fields[5]) != nil else {
                throw .malformedVersion1("a port that is not 0–65535")
            }
            // Only what an address is written with: inet_pton stops at a NUL (`10.4.4.4\0<script>`
            // read as 10.4.4.4) and takes IPv6 scope ids (`fe80::1%eth0`).
            guard Self.isAddressText(fields[2]), Self.isAddressText(fields[3]) else {
                throw .malformedVersion1("an address with characters other than hex digits, '.' and ':'")
            }
            guard let source = try? SocketAddress(ipAddress: String(fields[2]), port: port),
                (try? SocketAddress(ipAddress: String(fields[3]), port: 0)) != nil
            else { throw .malformedVersion1("an address that does not parse") }
            let isIPv6 = if case .v6 = source { true } else { false }
            guard isIPv6 == (fields[1] == "TCP6") else { throw .malformedVersion1("an address of the other family") }
            header = ProxyHeader(version: .one, source: source)
        default:
            throw .malformedVersion1("protocol \(fields[1].prefix(8))")
        }
        buffer.moveReaderIndex(forwardBy: lineEnd + 1)
        return header
    }

    /// Hex digits, `.` and `:` only, at most 45 of them (the longest IPv6 text).
    private static func isAddressText(_ text: Substring) -> Bool {
        (1...45).contains(text.utf8.count)
            && text.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"),
                    UInt8(ascii: "A")...UInt8(ascii: "F"), UInt8(ascii: "."), UInt8(ascii: ":"):
                    true
                default: false
                }
            }
    }

    /// A port as version 1 writes it: decimal, no sign, no leading zero (but "0").
    private static func port(_ text: Substring) -> Int? {
        guard (1...5).contains(text.count), text.allSatisfy({ $0.isASCII && $0.isNumber }),
            text == "0" || !text.hasPrefix("0"),
            let value = Int(text), value <= 65_535
        else { return nil }
        return value
    }

    // MARK: Version 2

    private static func parseVersion2(_ buffer: inout ByteBuffer) throws(ProxyHeaderError) -> ProxyHeader? {
        let start = buffer.readerIndex
        guard buffer.getBytes(at: start, length: 12) == Self.version2Signature else { throw .missing }
        let versionAndCommand = buffer.getInteger(at: start + 12, as: UInt8.self)!
        let familyAndTransport = buffer.getInteger(at: start + 13, as: UInt8.self)!
        let length = Int(buffer.getInteger(at: start + 14, as: UInt16.self)!)
        guard versionAndCommand >> 4 == 2 else { throw .malformedVersion2("version \(versionAndCommand >> 4)") }
        guard 16 + length <= Self.maximumVersion2Length else { throw .malformedVersion2("a length of \(length)") }
        let command = versionAndCommand & 0x0F
        guard command <= 1 else { throw .malformedVersion2("command \(command)") }
        guard buffer.readableBytes >= 16 + length else { return nil }
        defer { buffer.moveReaderIndex(forwardBy: 16 + length) }
        // LOCAL: the load balancer's own connection (a health check); its addresses are ignored.
        guard command == 1 else { return ProxyHeader(version: .two, source: nil) }
        let addresses = start + 16
        switch familyAndTransport {
        case 0x11:  // TCP over IPv4: source, destination, source port, destination port.
            guard length >= 12 else { throw .malformedVersion2("an IPv4 block of \(length) bytes") }
            let bytes = buffer.getBytes(at: addresses, length: 4)!
            let port = Int(buffer.getInteger(at: addresses + 8, as: UInt16.self)!)
            let text = bytes.map(String.init).joined(separator: ".")
            return ProxyHeader(version: .two, source: try? SocketAddress(ipAddress: text, port: port))
        case 0x21:  // TCP over IPv6.
            guard length >= 36 else { throw .malformedVersion2("an IPv6 block of \(length) bytes") }
            let bytes = buffer.getBytes(at: addresses, length: 16)!
            let port = Int(buffer.getInteger(at: addresses + 32, as: UInt16.self)!)
            var groups: [String] = []
            for index in stride(from: 0, to: 16, by: 2) {
                groups.append(String(UInt16(bytes[index]) << 8 | UInt16(bytes[index + 1]), radix: 16))
            }
            return ProxyHeader(
                version: .two,
                source: try? SocketAddress(ipAddress: groups.joined(separator: ":"), port: port)
            )
        default:
            // UNSPEC, UDP, UNIX: nothing the bridge can use as a client address.
            return ProxyHeader(version: .two, source: nil)
        }
    }
}

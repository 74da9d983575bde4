import NIOCore
import ProxyProtocol
import Testing

@Suite("PROXY protocol header parser (versions 1 and 2)")
struct ProxyHeaderParserTests {
    static let signature: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A]

    /// A version 2 header: command 1 (PROXY) or 0 (LOCAL), a family byte and an address block.
    static func version2(command: UInt8 = 1, family: UInt8, block: [UInt8]) -> [UInt8] {
        Self.signature + [0x20 | command, family, UInt8(block.count >> 8), UInt8(block.count & 0xFF)] + block
    }

    static let ipv4Block: [UInt8] = [203, 0, 113, 7] + [10, 0, 0, 1] + [0x15, 0xB3] + [0x08, 0x93]  // :5555 → :2195

    /// Parses `bytes` fed one at a time, as a slow load balancer's segments would come; returns
    /// the header, what was left after it, and how many bytes were fed before it was whole.
    static func parseBytewise(
        _ bytes: [UInt8]
    ) throws(ProxyHeaderError) -> (header: ProxyHeader?, rest: [UInt8], fed: Int) {
        var buffer = ByteBuffer()
        for (index, byte) in bytes.enumerated() {
            buffer.writeInteger(byte)
            if let header = try ProxyHeaderParser.parse(&buffer) {
                return (header, Array(buffer.readableBytesView) + Array(bytes[(index + 1)...]), index + 1)
            }
        }
        return (nil, Array(buffer.readableBytesView), bytes.count)
    }

    @Test("Version 1 TCP4 and TCP6: the client's address and port; the bytes after the CRLF are left for TLS")
    func version1() throws {
        let tls: [UInt8] = [0x16, 0x03, 0x01]
        let v4 = try Self.parseBytewise(Array("PROXY TCP4 203.0.113.7 10.0.0.1 5555 2195\r\n".utf8) + tls)
        #expect(
            v4.header == ProxyHeader(version: .one, source: try SocketAddress(ipAddress: "203.0.113.7", port: 5555))
        )
        #expect(v4.rest == tls)
        let v6 = try Self.parseBytewise(Array("PROXY TCP6 2001:db8::7 2001:db8::1 40000 2196\r\n".utf8))
        #expect(
            v6.header == ProxyHeader(version: .one, source: try SocketAddress(ipAddress: "2001:db8::7", port: 40000))
        )
        let unknown = try Self.parseBytewise(Array("PROXY UNKNOWN whatever follows\r\n".utf8))
        #expect(unknown.header == ProxyHeader(version: .one, source: nil))
    }

    @Test("Version 2 PROXY over IPv4 and IPv6, LOCAL, and a family the bridge cannot use; TLVs are passed over")
    func version2() throws {
        let v4 = try Self.parseBytewise(Self.version2(family: 0x11, block: Self.ipv4Block) + [0x16])
        #expect(
            v4.header == ProxyHeader(version: .two, source: try SocketAddress(ipAddress: "203.0.113.7", port: 5555))
        )
        #expect(v4.rest == [0x16])
        var ipv6: [UInt8] = [0x20, 0x01, 0x0D, 0xB8] + [UInt8](repeating: 0, count: 11) + [7]
        ipv6 += [0x20, 0x01, 0x0D, 0xB8] + [UInt8](repeating: 0, count: 11) + [1]
        ipv6 += [0x9C, 0x40, 0x08, 0x94]
        let v6 = try Self.parseBytewise(Self.version2(family: 0x21, block: ipv6))
        #expect(
            v6.header == ProxyHeader(version: .two, source: try SocketAddress(ipAddress: "2001:db8::7", port: 40000))
        )
        // A TLV after the addresses (HAProxy's unique-id, type 0x05) is skipped with them.
        let withTLV = try Self.parseBytewise(
            Self.version2(family: 0x11, block: Self.ipv4Block + [0x05, 0x00, 0x03, 0x61, 0x62, 0x63]) + [0x16]
        )
        #expect(withTLV.header?.source == (try SocketAddress(ipAddress: "203.0.113.7", port: 5555)))
        #expect(withTLV.rest == [0x16])
        let local = try Self.parseBytewise(Self.version2(command: 0, family: 0x00, block: []))
        #expect(local.header == ProxyHeader(version: .two, source: nil))
        let unix = try Self.parseBytewise(Self.version2(family: 0x31, block: [UInt8](repeating: 0, count: 216)))
        #expect(unix.header == ProxyHeader(version: .two, source: nil))
    }

    @Test("Bytes that are not a PROXY header are refused at the first byte that tells")
    func missing() {
        for bytes: [UInt8] in [
            [0x16, 0x03, 0x01], Array("GET / HTTP/1.1\r\n".utf8), Array("PROXZ".utf8), [0x0D, 0x0A, 0x0D, 0x0A, 0x01],
        ] {
            #expect(throws: ProxyHeaderError.missing, "\(bytes)") { _ = try Self.parseBytewise(bytes) }
        }
    }

    @Test("Malformed headers are refused; nothing waits for more than the bound")
    func malformed() {
        let lines = [
            "PROXY TCP4 203.0.113.7 10.0.0.1 5555\r\n",  // a field missing
            "PROXY TCP4 203.0.113.7 10.0.0.1 5555 2195 extra\r\n",
            "PROXY TCP4 2001:db8::7 10.0.0.1 5555 2195\r\n",  // the other family
            "PROXY TCP4 203.0.113.300 10.0.0.1 5555 2195\r\n",
            "PROXY TCP4 203.0.113.7 10.0.0.1 65536 2195\r\n",
            "PROXY TCP4 203.0.113.7 10.0.0.1 05555 2195\r\n",
            "PROXY UDP4 203.0.113.7 10.0.0.1 5555 2195\r\n",
            "PROXY TCP4 203.0.113.7 10.0.0.1 5555 2195\n",  // LF without CR
            "PROXY TCP4 10.4.4.4\u{0}<script> 10.0.0.1 5555 2195\r\n",  // inet_pton stops at the NUL
            "PROXY TCP6 fe80::1%eth0 ::1 5555 2195\r\n",  // a scope id
            "PROXY TCP4 10.4.4.4 10.0.0.1\u{0}x 5555 2195\r\n",
        ]
        for line in lines {
            #expect(throws: ProxyHeaderError.self, "\(line.debugDescription)") {
                _ = try Self.parseBytewise(Array(line.utf8))
            }
        }
        // No CRLF within 107 bytes: refused at the 107th, not later.
        let endless = Array("PROXY TCP4 ".utf8) + [UInt8](repeating: 0x31, count: 200)
        var buffer = ByteBuffer(bytes: endless.prefix(ProxyHeaderParser.maximumVersion1Length - 1))
        #expect(
            (try? ProxyHeaderParser.parse(&buffer)) == .some(nil),
            "106 bytes without a CRLF may still become a header"
        )
        buffer.writeBytes(endless[(ProxyHeaderParser.maximumVersion1Length - 1)...])
        #expect(throws: ProxyHeaderError.self) { _ = try ProxyHeaderParser.parse(&buffer) }
        // Version 2: another version, another command, a length above the bound (refused on the
        // 16 fixed bytes, before its block), an address block too short for its family.
        var wrongVersion = Self.version2(family: 0x11, block: Self.ipv4Block)
        wrongVersion[12] = 0x11
        var wrongCommand = Self.version2(family: 0x11, block: Self.ipv4Block)
        wrongCommand[12] = 0x22
        let tooLong = Self.signature + [0x21, 0x11, 0xFF, 0xFF]
        let short = Self.version2(family: 0x21, block: Self.ipv4Block)
        for bytes in [wrongVersion, wrongCommand, tooLong, short] {
            #expect(throws: ProxyHeaderError.self, "\(bytes.prefix(16))") { _ = try Self.parseBytewise(bytes) }
        }
    }

    @Test("Any prefix of a valid header asks for more and consumes nothing")
    func prefixes() throws {
        for header in [
            Array("PROXY TCP4 203.0.113.7 10.0.0.1 5555 2195\r\n".utf8),
            Self.version2(family: 0x11, block: Self.ipv4Block),
        ] {
            for length in 0..<header.count {
                var buffer = ByteBuffer(bytes: header.prefix(length))
                #expect(try ProxyHeaderParser.parse(&buffer) == nil)
                #expect(buffer.readableBytes == length)
            }
        }
    }
}

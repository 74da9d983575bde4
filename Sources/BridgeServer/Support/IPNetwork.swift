import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// An IPv4 or IPv6 network in CIDR notation (`10.0.0.0/8`, `fd00::/8`), or one address
/// (`127.0.0.1`, `::1`). An IPv4 network also holds the IPv4-mapped IPv6 form of its addresses
/// (`::ffff:10.0.0.1`), which a listener bound to `::` sees; an IPv4-mapped network written as
/// such (`::ffff:10.0.0.0/104`) is that IPv4 network (`10.0.0.0/8`), so it holds IPv4 peers too.
package struct IPNetwork: Sendable, Hashable, CustomStringConvertible {
    /// The network's address, 4 or 16 bytes, with the bits past the prefix cleared.
    package let bytes: [UInt8]
    package let prefixLength: Int

    /// `nil` when `text` is not an address, optionally followed by `/` and a prefix length no
    /// longer than the address.
    package init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = try? SocketAddress(ipAddress: String(parts[0]), port: 0),
            var bytes = Self.bytes(of: address)
        else { return nil }
        let bits = bytes.count * 8
        var prefix = bits
        if parts.count == 2 {
            guard let length = Int(parts[1]), parts[1].allSatisfy(\.isNumber), (0...bits).contains(length) else {
                return nil
            }
            prefix = length
        }
        if bytes.count == 16, prefix >= 96, bytes.prefix(12).elementsEqual(Self.ipv4MappedPrefix) {
            bytes = Array(bytes.suffix(4))
            prefix -= 96
        }
        self.bytes = Self.masked(bytes, prefix: prefix)
        self.prefixLength = prefix
    }

    /// `::ffff:0:0/96`, the IPv4-mapped addresses.
    private static let ipv4MappedPrefix: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF]

    package var description: String {
        let address =
            self.bytes.count == 4 ? self.bytes.map(String.init).joined(separator: ".") : Self.ipv6Text(self.bytes)
        return "\(address)/\(self.prefixLength)"
    }

    /// Whether `address` lies in this network.
    package func contains(_ address: SocketAddress) -> Bool {
        guard var candidate = Self.bytes(of: address) else { return false }
        if self.bytes.count == 4, candidate.count == 16, candidate.prefix(12).elementsEqual(Self.ipv4MappedPrefix) {
            candidate = Array(candidate.suffix(4))
        }
        guard candidate.count == self.bytes.count else { return false }
        return Self.masked(candidate, prefix: self.prefixLength) == self.bytes
    }

    /// The address's bytes in network order: 4 for IPv4, 16 for IPv6; `nil` for a UNIX socket.
    static func bytes(of address: SocketAddress) -> [UInt8]? {
        address.ipAddress.flatMap(Self.bytes(ofText:))
    }

    private static func bytes(ofText text: String) -> [UInt8]? {
        var v4 = [UInt8](repeating: 0, count: 4)
        if inet_pton(AF_INET, text, &v4) == 1 { return v4 }
        var v6 = [UInt8](repeating: 0, count: 16)
        if inet_pton(AF_INET6, text, &v6) == 1 { return v6 }
        return nil
    }

    private static func masked(_ bytes: [UInt8], prefix: Int) -> [UInt8] {
        var result = bytes
        for index in result.indices {
            let kept = max(0, min(8, prefix - index * 8))
            result[index] &= kept == 0 ? 0 : UInt8(truncatingIfNeeded: 0xFF << (8 - kept))
        }
        return result
    }

    private static func ipv6Text(_ bytes: [UInt8]) -> String {
        stride(from: 0, to: 16, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }.joined(
            separator: ":"
        )
    }
}

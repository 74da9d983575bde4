import BridgeTestSupport
import Crypto
import DevelopmentPKI
import Foundation
import NIOSSL

/// The files one load run needs, in a temporary folder: a CA, the server identity both the
/// bridge and the upstream present, a provider identity (client certificate), a `.p8` key.
struct Workspace {
    static let keyID = "KEY1234567"
    static let teamID = "TEAM123456"
    static let topic = "com.example.app"

    let directory: String
    let pki: DevelopmentCA
    let provider: DevelopmentIdentity
    let signingKey: P256.Signing.PrivateKey
    let caPath: String
    let serverCertificatePath: String
    let serverKeyPath: String
    let signingKeyPath: String

    init() throws {
        self.directory =
            FileManager.default.temporaryDirectory.appendingPathComponent("apns-bridge-load-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: self.directory, withIntermediateDirectories: true)
        self.pki = try DevelopmentCA(name: "apns-bridge load CA")
        self.provider = try self.pki.providerIdentity(bundleID: Self.topic)
        let server = try self.pki.server.writePEMFiles(to: self.directory, name: "server")
        self.serverCertificatePath = server.certificate
        self.serverKeyPath = server.privateKey
        self.caPath = self.directory + "/ca.pem"
        try self.pki.caCertificatePEM.write(toFile: self.caPath, atomically: true, encoding: .utf8)
        self.signingKey = P256.Signing.PrivateKey()
        self.signingKeyPath = self.directory + "/AuthKey.p8"
        try self.signingKey.pemRepresentation.write(toFile: self.signingKeyPath, atomically: true, encoding: .utf8)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: self.directory)
    }
}

/// Device tokens of the load: 32 bytes, the first 8 the notification's number (big-endian),
/// so the upstream can tell which notification arrived. With `distinct` set, numbers are taken
/// modulo it (nghttpd serves one empty file per token, so the set must stay small).
enum LoadToken {
    static let length = 32

    static func number(for id: Int, distinct: Int?) -> UInt64 {
        UInt64(distinct.map { id % $0 } ?? id)
    }

    static func hex(_ number: UInt64) -> String {
        let head = String(number, radix: 16)
        return String(repeating: "0", count: 16 - head.count) + head + String(repeating: "ab", count: 24)
    }

    /// The number in a token's lowercase hex (as the mock reports it), or nil.
    static func number(fromHex hex: String) -> Int? {
        guard hex.utf8.count == 64 else { return nil }
        var value: UInt64 = 0
        for byte in hex.utf8.prefix(16) {
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            default: return nil
            }
            value = value << 4 | UInt64(digit)
        }
        return Int(exactly: value)
    }
}

/// A notification payload of about `size` bytes of JSON.
func loadPayload(size: Int) -> String {
    let head = #"{"aps":{"alert":""#
    let tail = #""}}"#
    return head + String(repeating: "x", count: max(0, size - head.count - tail.count)) + tail
}

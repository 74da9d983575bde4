import DevelopmentPKI
import Foundation
import NIOCore

/// The habits of real legacy clients that the project's own client does not have, reproduced
/// with tools every machine has: `openssl s_client` (a session saved and resumed, as Java's JSSE
/// and .NET do on every reconnect), CPython's `ssl` (Tests/Interop/habits/legacy_habits.py:
/// a resumed session, and a feedback reader that takes one 38-byte `recv` per tuple as Go's
/// libraries do), and Go's `crypto/tls` (Tests/Interop/habits/go_habits.go: the Go libraries'
/// reads, which drop bytes that come with an error such as the close behind them).
package enum LegacyHabits {
    /// python3 and openssl are on PATH (`.ci/run` installs both, and requires them).
    package static var available: Bool { executablePath("python3") != nil && executablePath("openssl") != nil }

    /// go is on PATH (Debian: `golang-go`; `.ci/run` installs it, and requires it).
    package static var goAvailable: Bool { executablePath("go") != nil }

    private static let folder = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Tests/Interop/habits")

    package static let script = Self.folder.appendingPathComponent("legacy_habits.py").path
    package static let goProgram = Self.folder.appendingPathComponent("go_habits.go").path

    /// A provider's certificate, key and the CA as PEM files in `directory`, for external clients.
    package struct Files: Sendable {
        package var certificate: String
        package var privateKey: String
        package var ca: String

        package init(identity: DevelopmentIdentity, pki: DevelopmentCA, in directory: String, name: String) throws {
            (self.certificate, self.privateKey) = try identity.writePEMFiles(to: directory, name: name)
            self.ca = directory + "/\(name)-ca.pem"
            try pki.caCertificatePEM.write(toFile: self.ca, atomically: true, encoding: .utf8)
        }
    }

    /// Writes `bytes` to a new file in `directory`; its path.
    package static func file(_ bytes: ByteBuffer, in directory: String) throws -> String {
        let path = directory + "/frames-\(UUID().uuidString).bin"
        try Data(bytes.readableBytesView).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Runs the habits script's `command` and decodes the JSON object it prints.
    package static func python<Result: Decodable>(
        _ command: String,
        _ arguments: [String],
        as: Result.Type
    ) async throws -> Result {
        let run = try await ChildRun.run("python3", [Self.script, command] + arguments)
        guard run.status == 0, let result = try? JSONDecoder().decode(Result.self, from: Data(run.outputBytes)) else {
            throw Failed(
                what: "legacy_habits.py \(command)",
                status: run.status,
                detail: run.output + run.error.suffix(2000)
            )
        }
        return result
    }

    /// Runs go_habits.go's `command` with `go run` (standard library only; built once into a
    /// build cache in the tests' temporary folder) and decodes the JSON object it prints.
    package static func go<Result: Decodable>(
        _ command: String,
        _ arguments: [String],
        as: Result.Type
    ) async throws -> Result {
        let temporary = FileManager.default.temporaryDirectory.path
        let run = try await ChildRun.run(
            "env",
            [
                "GOCACHE=\(temporary)/go-build-cache", "GOPATH=\(temporary)/go-path", "go", "run", Self.goProgram,
                command,
            ]
                + arguments
        )
        guard run.status == 0, let result = try? JSONDecoder().decode(Result.self, from: Data(run.outputBytes)) else {
            throw Failed(
                what: "go_habits.go \(command)",
                status: run.status,
                detail: run.output + run.error.suffix(2000)
            )
        }
        return result
    }

    /// One connection of `openssl s_client` (TLS 1.2, a client certificate): writes the file
    /// `input` (or nothing), reads until the server closes; saves its session to `sessionOut`
    /// and/or offers the one in `sessionIn`.
    package static func openssl(
        port: Int,
        files: Files,
        input: String? = nil,
        sessionOut: String? = nil,
        sessionIn: String? = nil
    ) async throws -> OpenSSLRun {
        var arguments = [
            "s_client", "-connect", "127.0.0.1:\(port)", "-tls1_2", "-ign_eof",
            "-cert", files.certificate, "-key", files.privateKey, "-CAfile", files.ca,
        ]
        if let sessionOut { arguments += ["-sess_out", sessionOut] }
        if let sessionIn { arguments += ["-sess_in", sessionIn] }
        return OpenSSLRun(run: try await ChildRun.run("openssl", arguments, input: input, timeout: .seconds(60)))
    }

    package struct OpenSSLRun: Sendable {
        package var run: ChildRun
        /// s_client's summary says the session was resumed.
        package var reused: Bool { self.run.output.contains("Reused, TLSv") }
        /// A full handshake, as far as the client saw (in TLS 1.2 its side completes before the
        /// server has checked its certificate).
        package var new: Bool { self.run.output.contains("New, TLSv") }
        /// The server refused the client's certificate with an alert.
        package var refusedByServer: Bool {
            self.run.error.contains("alert certificate unknown") || self.run.error.contains("alert handshake failure")
        }

        /// Whether the bytes the server sent (among s_client's text) contain `bytes`.
        package func received(_ bytes: [UInt8]) -> Bool {
            self.run.outputBytes.firstRange(of: bytes) != nil
        }
    }

    package struct Failed: Error, CustomStringConvertible {
        package var what: String
        package var status: Int32
        package var detail: String
        package var description: String { "\(self.what) exited \(self.status): \(self.detail)" }
    }
}

import ArgumentParser
import BridgeApp
import BridgeCore
import Crypto
import DevelopmentPKI
import Foundation
import Logging
import MockAPNs
import NIOCore
import NIOSSL

struct MockAPNsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mock-apns",
        abstract: "Runs a mock APNs server (TLS, HTTP/2) that validates and answers like APNs, with scripted faults.",
        discussion: """
            For staging a migration without an Apple account: point the bridge's upstream at it \
            (with its CA). Without --certificate it makes a throwaway CA and server certificate \
            for localhost and 127.0.0.1 and writes the CA to --write-ca. Authentication tokens are \
            checked against the keys given with --signing-key; a connection with a client \
            certificate from --client-ca needs none. It also serves the broadcast push API \
            (/4/broadcasts/apps/…) and the channel management API (/1/apps/…/channels), so \
            `apns-bridge channels` and frames to channel tokens can be tried against it \
            (docs/broadcast.md). On SIGINT or SIGTERM it prints what it received and exits.

            Example:
              apns-bridge mock-apns --port 2197 --write-ca /tmp/mock-ca.pem \\
                --signing-key ABC123DEFG:TEAM123456:AuthKey_ABC123DEFG.p8 \\
                --unregistered 0123…ef@1767225600000 --fail 2:503:ServiceUnavailable
            """
    )

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on (0: any free port).") var port = 2197
    @Option(help: "Server certificate chain (PEM). Without it, a throwaway one is made.") var certificate: String?
    @Option(help: "Server private key (PEM), with --certificate.") var privateKey: String?
    @Option(help: "Where to write the throwaway CA certificate (PEM) that clients must trust.") var writeCA: String?
    @Option(help: "CA bundle (PEM) for client certificates (certificate auth).") var clientCA: String?
    @Option(
        name: .customLong("signing-key"),
        help:
            "KEYID:TEAMID:PATH of a key whose authentication tokens are accepted; PATH is the .p8 file or its public key (PEM). Repeatable."
    )
    var signingKeys: [String] = []
    @Option(name: .customLong("topic"), help: "A topic to accept (repeatable; none: any topic).") var topics: [String] =
        []
    @Option(help: "MAX_CONCURRENT_STREAMS announced to clients.") var maxConcurrentStreams = 1000
    @Option(
        name: .customLong("unregistered"),
        help: "TOKEN@MILLISECONDS: answer 410 Unregistered for this hex token (repeatable)."
    )
    var unregistered: [String] = []
    @Option(name: .customLong("bad-token"), help: "Answer 400 BadDeviceToken for this hex token (repeatable).")
    var badTokens: [String] = []
    @Option(
        name: .customLong("fail"),
        help: "N:STATUS:REASON: answer the next N requests so, then succeed (repeatable)."
    ) var failures: [String] = []
    @Option(help: "Send GOAWAY on each connection's K-th request, leaving it and later ones unprocessed.")
    var goawayEvery: Int?
    @Option(help: "Delay every answer by this many milliseconds.") var delayMs: Int = 0
    @Option(help: "Reset the next N streams with REFUSED_STREAM.") var refuseStreams: Int = 0
    @Option(help: "Close each connection without GOAWAY when its K-th request arrives.") var dropAfter: Int?
    @Flag(help: "Never answer PINGs.") var ignorePings = false
    @Option(help: "Log level: trace, debug, info, notice, warning, error.") var logLevel: String = "info"

    /// Every option's format, checked before anything is bound or written.
    func validate() throws {
        guard Logger.Level(rawValue: self.logLevel) != nil else {
            throw ValidationError("--log-level: unknown level \(self.logLevel)")
        }
        _ = try self.unregistered.map(Self.unregisteredEntry)
        _ = try self.failures.map(Self.failure)
        for key in self.signingKeys where key.split(separator: ":", maxSplits: 2).count != 3 {
            throw ValidationError("--signing-key \(key): expected KEYID:TEAMID:PATH")
        }
    }

    func run() async throws {
        // Its log carries what clients send (topics, reasons): escaped, one line per event.
        LoggingSystem.bootstrap { BridgeLogHandler(label: $0, format: .text, logLevel: .info) }
        var logger = Logger(label: "apns-bridge.mock-apns")
        logger.logLevel = Logger.Level(rawValue: self.logLevel) ?? .info

        var configuration: MockAPNsConfiguration
        if let certificate = self.certificate {
            guard let privateKey = self.privateKey else { throw ValidationError("--certificate needs --private-key") }
            configuration = MockAPNsConfiguration(
                certificateChain: try NIOSSLCertificate.fromPEMFile(certificate),
                privateKey: try NIOSSLPrivateKey(file: privateKey, format: .pem)
            )
        } else {
            let pki = try DevelopmentCA(name: "apns-bridge mock-apns CA")
            configuration = MockAPNsConfiguration(
                certificateChain: [pki.server.certificate],
                privateKey: pki.server.privateKey
            )
            let path =
                self.writeCA
                ?? FileManager.default.temporaryDirectory.appendingPathComponent("apns-bridge-mock-apns-ca.pem").path
            try pki.caCertificatePEM.write(toFile: path, atomically: true, encoding: .utf8)
            Self.say("throwaway CA written to \(path) (clients must trust it; the server name is localhost)")
        }
        configuration.host = self.host
        configuration.port = self.port
        configuration.maximumConcurrentStreams = self.maxConcurrentStreams
        configuration.topics = self.topics.isEmpty ? nil : Set(self.topics)
        if let clientCA = self.clientCA {
            configuration.clientCertificateTrustRoots = .file(clientCA)
        }
        configuration.signingKeys = try self.signingKeys.map(Self.signingKey)
        if configuration.signingKeys.isEmpty {
            Self.say("no --signing-key: authentication tokens will be refused (InvalidProviderToken)")
        }

        let server = try await MockAPNsServer.start(configuration: configuration, logger: logger)
        try self.applyScript(server.script)
        if self.maxConcurrentStreams != configuration.maximumConcurrentStreams {
            server.setMaximumConcurrentStreams(self.maxConcurrentStreams)
        }
        Self.say("mock APNs listening on \(server.localAddress.hostAndPort)")

        // Runs until SIGINT or SIGTERM, then prints the ledger's counters.
        let (signals, continuation) = AsyncStream<Int32>.makeStream()
        var sources: [any DispatchSourceSignal] = []
        for signalNumber in [SIGINT, SIGTERM] {
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber)
            source.setEventHandler { continuation.yield(signalNumber) }
            source.resume()
            sources.append(source)
        }
        for await _ in signals { break }
        for source in sources { source.cancel() }
        let counters = server.ledger.counters
        Self.say(
            "answered \(counters.answered) (200: \(counters.accepted)), refused \(counters.refused), unprocessed \(counters.unprocessed), GOAWAYs \(counters.goAways), connections \(counters.connectionsAccepted)"
        )
        await server.close()
    }

    private func applyScript(_ script: MockAPNsScript) throws {
        for entry in self.unregistered {
            let (token, milliseconds) = try Self.unregisteredEntry(entry)
            script.unregister(token: token, atMilliseconds: milliseconds)
        }
        for token in self.badTokens {
            script.rejectAsBadToken(token)
        }
        for failure in self.failures {
            let (count, status, reason) = try Self.failure(failure)
            script.fail(count, status: status, reason: reason)
        }
        script.goAway(every: self.goawayEvery)
        script.delayResponses(by: .milliseconds(Int64(self.delayMs)))
        script.refuseStreams(self.refuseStreams)
        script.dropConnections(after: self.dropAfter)
        script.ignorePings(self.ignorePings)
    }

    /// `--unregistered TOKEN@MILLISECONDS`.
    private static func unregisteredEntry(_ entry: String) throws -> (token: String, milliseconds: UInt64) {
        let parts = entry.split(separator: "@")
        guard parts.count == 2, let milliseconds = UInt64(parts[1]) else {
            throw ValidationError("--unregistered \(entry): expected TOKEN@MILLISECONDS")
        }
        return (String(parts[0]), milliseconds)
    }

    /// `--fail N:STATUS:REASON`.
    private static func failure(_ entry: String) throws -> (count: Int, status: Int, reason: MockAPNsReason) {
        let parts = entry.split(separator: ":")
        guard parts.count == 3, let count = Int(parts[0]), let status = Int(parts[1]) else {
            throw ValidationError("--fail \(entry): expected N:STATUS:REASON")
        }
        return (count, status, MockAPNsReason(String(parts[2])))
    }

    private static func signingKey(_ argument: String) throws -> MockAPNsConfiguration.SigningKey {
        let parts = argument.split(separator: ":", maxSplits: 2)
        guard parts.count == 3 else { throw ValidationError("--signing-key \(argument): expected KEYID:TEAMID:PATH") }
        let pem = try String(contentsOfFile: String(parts[2]), encoding: .utf8)
        let publicKey: P256.Signing.PublicKey
        if pem.contains("PRIVATE KEY") {
            publicKey = try P256.Signing.PrivateKey(pemRepresentation: pem).publicKey
        } else {
            publicKey = try P256.Signing.PublicKey(pemRepresentation: pem)
        }
        return .init(keyID: String(parts[0]), teamID: String(parts[1]), publicKey: publicKey)
    }

    /// One line on standard output, written at once (`print` buffers when the output is a file
    /// or a pipe, and scripts wait for the "listening on" line).
    private static func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }
}

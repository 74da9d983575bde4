import ArgumentParser
import Foundation
import LegacyClient
import LegacyProtocol
import NIOCore

struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract:
            "A legacy provider for smoke tests: sends notification frames to a gateway and reports the error-response, if any.",
        discussion: """
            Sends one frame per --token over one TLS connection with a client certificate, \
            identifiers counting up from --identifier, then waits --wait-ms for an error-response. \
            Without one, it ends the connection as a provider that is done (close_notify) and \
            returns when the bridge has closed its side. Exits 0 when no error-response came (the \
            bridge took the notifications), 1 when one came (it is printed: status and \
            identifier), like the legacy interface's own contract.
            """
    )

    @Option(help: "The gateway, HOST:PORT.")
    var gateway = "127.0.0.1:2195"

    @OptionGroup var client: LegacyClientOptions

    @Option(name: .customLong("command"), help: "Frame format: 0 (simple), 1 (enhanced) or 2 (items).")
    var frameCommand: UInt8 = 2

    @Option(name: .customLong("token"), help: "Device token in hex (repeat for several notifications).")
    var tokens: [String]

    @Option(help: "JSON payload.")
    var payload = #"{"aps":{"alert":"Hello from apns-bridge send"}}"#

    @Option(help: "Identifier of the first notification (commands 1 and 2).")
    var identifier: UInt32 = 1

    @Option(help: "Expiry, seconds since 1970 (0: do not store).")
    var expiry: UInt32 = 0

    @Option(help: "Priority (command 2): 10 or 5.")
    var priority: UInt8 = 10

    @Option(name: .customLong("wait-ms"), help: "How long to wait for an error-response.")
    var waitMilliseconds: Int64 = 1000

    func run() async throws {
        guard let command = NotificationFrame.Command(rawValue: self.frameCommand) else {
            throw ValidationError("--command \(self.frameCommand): expected 0, 1 or 2")
        }
        var bytes = ByteBuffer()
        for (index, hex) in self.tokens.enumerated() {
            guard let token = Self.bytes(hex: hex) else { throw ValidationError("--token \(hex): not hexadecimal") }
            bytes.writeImmutableBuffer(
                FrameBuilder.frame(
                    command,
                    identifier: self.identifier &+ UInt32(index),
                    expiration: self.expiry,
                    priority: self.priority,
                    token: token,
                    payload: ByteBuffer(string: self.payload)
                )
            )
        }
        let (address, serverName) = try LegacyClientOptions.resolve(self.gateway, option: "--gateway")
        let connection = try await LegacyConnection.connect(
            to: address,
            tls: try self.client.tlsConfiguration(),
            serverHostname: self.client.serverName ?? serverName
        )
        try await connection.send(bytes)
        print("sent \(self.tokens.count) notification(s) with command \(command.rawValue) to \(self.gateway)")
        var answer: ByteBuffer
        do {
            answer = try await connection.bytesUntilClose(timeout: .milliseconds(self.waitMilliseconds))
        } catch is TimedOut {
            // Done: close_notify, and the bridge closes its side once every notification has
            // its outcome (an error-response decided meanwhile comes first).
            guard var late = await connection.finish() else {
                print(
                    "no error-response within \(self.waitMilliseconds) ms; the bridge had not closed the connection 5 s after close_notify"
                )
                return
            }
            if let packet = late.readErrorResponse() {
                print(
                    "error-response: status \(packet.status), identifier \(packet.identifier.rawValue); it came after close_notify, and the connection was closed"
                )
                throw ExitCode(1)
            }
            print(
                "no error-response within \(self.waitMilliseconds) ms: the bridge took them and closed the connection after close_notify"
            )
            return
        }
        guard let packet = answer.readErrorResponse() else {
            print("the bridge closed the connection without an error-response (\(answer.readableBytes) bytes)")
            throw ExitCode(1)
        }
        print(
            "error-response: status \(packet.status), identifier \(packet.identifier.rawValue); the connection was closed"
        )
        throw ExitCode(1)
    }

    static func bytes(hex: String) -> ByteBuffer? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var buffer = ByteBuffer()
        var index = 0
        while index < digits.count {
            guard let byte = UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16) else {
                return nil
            }
            buffer.writeInteger(byte)
            index += 2
        }
        return buffer
    }
}

struct FeedbackCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "feedback",
        abstract: "A feedback poller for smoke tests: connects to the feedback service and prints the tuples it sends.",
        discussion: "Reading the list empties it, as with Apple's feedback service: print what you need."
    )

    @Option(help: "The feedback service, HOST:PORT.")
    var feedback = "127.0.0.1:2196"

    @OptionGroup var client: LegacyClientOptions

    func run() async throws {
        let (address, serverName) = try LegacyClientOptions.resolve(self.feedback, option: "--feedback")
        let poll = try await FeedbackPoller.poll(
            address,
            tls: try self.client.tlsConfiguration(),
            serverHostname: self.client.serverName ?? serverName
        )
        for tuple in poll.tuples {
            let date = Date(timeIntervalSince1970: TimeInterval(tuple.timestamp))
            print("\(tuple.timestamp) (\(date.ISO8601Format()))  \(tuple.deviceToken.hexDump(format: .compact))")
        }
        print(
            "\(poll.tupleCount) tuple(s); \(poll.cleanClose ? "the service closed the connection at the end of the list" : "the connection was cut")"
        )
    }
}

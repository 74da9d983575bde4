import BridgeApp
import BridgeTestSupport
import Foundation
import Testing

/// `apns-bridge log` against a running bridge (the demo's: a notification APNs accepts, one it
/// rejects, one it answers 410 and a broadcast), checked against what the mock APNs printed it
/// received (docs/operations.md#did-it-go); `apns-bridge log --store` finds the failures in the
/// store.
extension ServeStartupTests {
    /// The apns-id (or broadcast apns-request-id), status and apns-unique-id of the demo's
    /// line for the request whose path starts with `path`.
    static func mockRecord(_ output: String, path: String) throws -> (apnsID: String, status: String, uniqueID: String?)
    {
        let line = try #require(output.split(separator: "\n").first { $0.contains("POST \(path)") }, "\(path)")
        let words = line.split(separator: " ")
        let idIndex = try #require(words.firstIndex { $0 == "apns-id" || $0 == "apns-request-id" })
        let arrow = try #require(words.firstIndex(of: "→"))
        let uniqueID = words.firstIndex(of: "apns-unique-id").map { String(words[$0 + 1]) }
        return (
            String(words[idIndex + 1]), String(words[arrow + 1]).trimmingCharacters(in: .punctuationCharacters),
            uniqueID
        )
    }

    static func checkPushLog(adminPort: Int, demoOutput output: String) async throws {
        let admin = "127.0.0.1:\(adminPort)"
        let json = try await Self.runToExitWithOutput(["log", "--admin", admin, "--format", "json"])
        #expect(json.status == 0, "\(json.stderr)")
        struct Document: Decodable { var entries: [PushLogRecord] }
        let entries = try JSONDecoder().decode(Document.self, from: Data(json.stdout.utf8)).entries

        struct Missing: Error, CustomStringConvertible { var description: String }
        func entry(apnsID: String) throws -> PushLogRecord {
            guard let found = entries.first(where: { $0.apnsID == apnsID }) else {
                throw Missing(description: "no entry for \(apnsID) in \(json.stdout)")
            }
            return found
        }
        let accepted = try Self.mockRecord(output, path: "/3/device/01000000")
        let first = try entry(apnsID: accepted.apnsID)
        #expect(first.status == 200 && "\(first.status ?? 0)" == accepted.status)
        #expect(first.outcome == "accepted" && first.told == "nothing")
        #expect(first.identifier == 1 && first.token == "01000000…" && first.attempts == 1)

        let rejected = try Self.mockRecord(output, path: "/3/device/ad0b0000")
        let bad = try entry(apnsID: rejected.apnsID)
        #expect(
            bad.status == 400 && "\(bad.status ?? 0)" == rejected.status && bad.reason == "BadDeviceToken"
                && bad.outcome == "rejected"
        )
        #expect(bad.told == "error-response 8 (invalid token)" && bad.identifier == 5)

        let unregistered = try Self.mockRecord(output, path: "/3/device/10040000")
        let gone = try entry(apnsID: unregistered.apnsID)
        #expect(
            gone.status == 410 && "\(gone.status ?? 0)" == unregistered.status && gone.reason == "Unregistered"
                && gone.outcome == "unregistered"
        )
        #expect(gone.told == "feedback list" && gone.identifier == 3)

        let broadcast = try Self.mockRecord(output, path: "/4/broadcasts/apps/com.example.demo")
        let sent = try entry(apnsID: broadcast.apnsID)
        #expect(
            sent.status == 200 && "\(sent.status ?? 0)" == broadcast.status && sent.channel == "scores"
                && sent.outcome == "accepted"
        )
        #expect(sent.apnsUniqueID != nil && sent.apnsUniqueID == broadcast.uniqueID)

        // The resend of 6 after the error-response was answered from its resend record.
        #expect(entries.contains { $0.identifier == 6 && $0.resendMatched && $0.status == nil })

        // By whole token: only its hash leaves the command, and the table shows its prefix.
        let token = "100400000000000008090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
        let byToken = try await Self.runToExitWithOutput(["log", "--admin", admin, "--token", token])
        #expect(byToken.status == 0, "\(byToken.stderr)")
        let rows = byToken.stdout.split(separator: "\n").dropFirst()
        #expect(rows.count == 1 && rows.first?.contains(unregistered.apnsID) == true, "\(byToken.stdout)")
        #expect(rows.first?.contains("10040000…") == true)
        #expect(!byToken.stdout.contains(token.prefix(16)), "the whole token is not printed")

        // Filters: the failures alone; a wrong status finds nothing; a bad value is refused.
        let failures = try await Self.runToExitWithOutput(["log", "--admin", admin, "--failures", "--format", "csv"])
        #expect(
            failures.stdout.split(separator: "\n").count == 3,
            "a header, the 410 and the rejection: \(failures.stdout)"
        )
        let none = try await Self.runToExitWithOutput(["log", "--admin", admin, "--status", "503"])
        #expect(none.stdout == "no notification found\n")
        let refused = try await Self.runToExitWithOutput(["log", "--admin", admin, "--since", "yesterday"])
        #expect(refused.status != 0 && refused.stderr.contains("--since yesterday"))

        // The failures in the store (the demo's SQLite file, beside the running bridge), read
        // with the command the demo printed once the writer's next copy has run: the same
        // records, and no 200.
        let printed = try #require(
            output.split(separator: "\n").first { $0.contains("apns-bridge log --store ") },
            "the demo prints the command"
        )
        let store = try #require(
            printed.split(separator: " ").drop { $0 != "--store" }.dropFirst().first.map(String.init)
        )
        let stored = try await eventually(
            "the failures in the store",
            timeout: .seconds(60),
            interval: .milliseconds(500)
        ) {
            () -> [PushLogRecord]? in
            let read = try await Self.runToExitWithOutput(["log", "--store", store, "--format", "json"])
            guard read.status == 0 else { throw Missing(description: "log --store: \(read.stderr)") }
            let records = try JSONDecoder().decode(Document.self, from: Data(read.stdout.utf8)).entries
            return records.count >= 2 ? records : nil
        }
        #expect(Set(stored.map(\.apnsID)) == [rejected.apnsID, unregistered.apnsID], "\(stored)")
        // The same record but for its time, which each read turns from the monotonic clock,
        // and the instance `log --admin` names.
        func timeless(_ record: PushLogRecord?) -> PushLogRecord? {
            record.map {
                var record = $0
                (record.received, record.receivedMilliseconds, record.instance) = ("", 0, nil)
                return record
            }
        }
        #expect(timeless(stored.first { $0.apnsID == rejected.apnsID }) == timeless(bad))
        #expect(timeless(stored.first { $0.apnsID == unregistered.apnsID }) == timeless(gone))
        let storedByToken = try await Self.runToExitWithOutput(["log", "--store", store, "--token", token])
        #expect(storedByToken.stdout.contains(unregistered.apnsID) && !storedByToken.stdout.contains(rejected.apnsID))
        let both = try await Self.runToExitWithOutput(["log", "--store", store, "--admin", admin])
        #expect(both.status != 0 && both.stderr.contains("--store"))
    }
}

import Foundation

/// What a command run to its end left: its exit status and its output.
package struct ChildRun: Sendable {
    package var status: Int32
    /// Standard output, as bytes (a legacy client's received frames may be among them).
    package var outputBytes: [UInt8]
    package var error: String
    package var output: String { String(decoding: self.outputBytes, as: UTF8.self) }

    /// Runs `executable` (a path, or a name looked up on PATH) to its end, with standard input
    /// from the file `input` (or nothing) and its output in files (no pipe to fill up), for at
    /// most `timeout`; then it is sent SIGTERM and awaited.
    package static func run(
        _ executable: String,
        _ arguments: [String],
        input: String? = nil,
        timeout: Duration = .seconds(180)
    ) async throws -> ChildRun {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("child-run-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let outputURL = folder.appendingPathComponent("stdout")
        let errorURL = folder.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: outputURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errorURL.path, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable.hasPrefix("/") ? executable : "/usr/bin/env")
        process.arguments = executable.hasPrefix("/") ? arguments : [executable] + arguments
        process.standardInput = try FileHandle(forReadingFrom: URL(fileURLWithPath: input ?? "/dev/null"))
        process.standardOutput = try FileHandle(forWritingTo: outputURL)
        process.standardError = try FileHandle(forWritingTo: errorURL)
        try process.run()
        _ = try? await eventually("\(executable) to exit", timeout: timeout, interval: .milliseconds(20)) {
            !process.isRunning
        }
        if process.isRunning {
            process.terminate()
            try await eventually("\(executable) to exit after SIGTERM", timeout: .seconds(60)) { !process.isRunning }
        }
        return ChildRun(
            status: process.terminationStatus,
            outputBytes: Array((try? Data(contentsOf: outputURL)) ?? Data()),
            error: (try? String(contentsOf: errorURL, encoding: .utf8)) ?? ""
        )
    }
}

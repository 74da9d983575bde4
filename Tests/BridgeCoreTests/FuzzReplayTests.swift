import Foundation
import LegacyStreamFuzzing
import Testing

/// Replays the fuzzer's seed corpus and every crasher it ever found (kept in
/// `FuzzCorpus/crashers/`) through the same code the fuzzer runs.
@Suite("Fuzz corpus replay")
struct FuzzReplayTests {
    static func files(in folder: String) throws -> [URL] {
        let root = try #require(Bundle.module.url(forResource: "FuzzCorpus", withExtension: nil))
        let directory = root.appendingPathComponent(folder)
        return try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
            .filter { !$0.lastPathComponent.hasPrefix(".") }
            .sorted { $0.path < $1.path }
    }

    @Test("Seeds and crashers run without a crash", arguments: ["seeds", "crashers"])
    func replay(folder: String) throws {
        let files = try Self.files(in: folder)
        if folder == "seeds" {
            #expect(files.count >= 6)
        }
        for file in files {
            let data = try Data(contentsOf: file)
            data.withUnsafeBytes { raw in
                LegacyStreamFuzzRun(input: raw.bindMemory(to: UInt8.self)).run()
            }
        }
    }
}

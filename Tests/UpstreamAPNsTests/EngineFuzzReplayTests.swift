import Foundation
import Testing
import UpstreamAPNs
import UpstreamEngineFuzzing

/// The fuzzer's seeds (recorded from MockAPNs and nghttpd with FuzzCorpus/record-seeds.py) and
/// every crasher it found, replayed on each test run through each engine this build has.
@Suite("HTTP/2 engines: fuzz corpus replay")
struct EngineFuzzReplayTests {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("FuzzCorpus")

    static var inputs: [String] {
        ["seeds", "crashers"].flatMap { folder in
            ((try? FileManager.default.contentsOfDirectory(atPath: Self.corpus.appendingPathComponent(folder).path))
                ?? [])
                .filter { !$0.hasPrefix(".") }.sorted().map { "\(folder)/\($0)" }
        }
    }

    @Test(
        "Each seed and crasher: every request completed exactly once, nothing after the close",
        arguments: EngineParityTests.engines,
        Self.inputs
    )
    func replay(engine: APNsHTTP2Engine, input: String) throws {
        let bytes = Array(try Data(contentsOf: Self.corpus.appendingPathComponent(input)))
        let problem = bytes.withUnsafeBufferPointer { UpstreamEngineFuzzRun(input: $0, engine: engine).run() }
        #expect(problem == nil)
    }

    @Test(
        "The seeds recorded from real servers are answers: MockAPNs' and nghttpd's requests complete with their statuses",
        arguments: EngineParityTests.engines
    )
    func seedsAreAnswers(engine: APNsHTTP2Engine) throws {
        #expect(Self.inputs.filter { $0.hasPrefix("seeds/") }.count >= 6)
        let seed = Array(try Data(contentsOf: Self.corpus.appendingPathComponent("seeds/nghttpd-echo")))
        let harness = try UpstreamEngineHarness(engine: engine)
        harness.serverWrites(ServerFrames.settings())
        let requests = (0..<4).map { _ in harness.send() }
        _ = harness.clientOutput()
        harness.serverWrites(Array(seed.dropFirst(2)))
        #expect(requests.allSatisfy { EngineParityTests.status(harness.results(of: $0)) == 200 })
        harness.close()
    }
}

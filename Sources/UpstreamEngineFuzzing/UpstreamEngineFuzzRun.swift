import NIOCore
import NIOEmbedded
import UpstreamAPNs

/// One libFuzzer input for an HTTP/2 engine (the fuzzer runs the libnghttp2 one; the tests
/// replay its corpus on both): arbitrary bytes from the server, cut into
/// reads, with requests in flight (some of which send another request from their completion,
/// re-entering the handler). A request completed twice, never, or after the close is a finding.
///
/// Input: byte 0 picks how many requests are in flight (1…16), byte 1 the size of the reads
/// (1…256), the rest is what the server sends. A valid empty SETTINGS comes first, so the
/// requests can start; the rest is the fuzzer's.
package struct UpstreamEngineFuzzRun {
    package let input: [UInt8]
    package let engine: APNsHTTP2Engine

    package init(input: UnsafeBufferPointer<UInt8>, engine: APNsHTTP2Engine) {
        self.input = Array(input)
        self.engine = engine
    }

    /// Runs the input; returns what went wrong, or `nil`.
    package func run() -> String? {
        guard self.input.count >= 2, let harness = try? UpstreamEngineHarness(engine: self.engine) else { return nil }
        let requests = Int(self.input[0] % 16) + 1
        let readSize = Int(self.input[1]) + 1
        harness.serverWrites(ServerFrames.settings())
        let box = HarnessBox(harness)
        for number in 0..<requests {
            if number % 4 == 0 {
                // Its completion sends another request on the same connection at once.
                harness.send { _ in box.harness.send() }
            } else {
                harness.send()
            }
        }
        _ = harness.clientOutput()
        var offset = 2
        while offset < self.input.count, harness.channel.isActive {
            let end = min(offset + readSize, self.input.count)
            harness.serverWrites(Array(self.input[offset..<end]))
            _ = harness.clientOutput()
            offset = end
        }
        harness.close()
        for number in 0..<harness.requestCount {
            let count = harness.results(of: number).count
            if count != 1 {
                return "request \(number) of \(harness.requestCount) completed \(count) times"
            }
        }
        if harness.completionsAfterSeal > 0 {
            return "\(harness.completionsAfterSeal) completions after the connection closed"
        }
        return nil
    }
}

/// The harness, handed to a completion (Sendable); everything runs on the EmbeddedEventLoop's
/// one thread.
private final class HarnessBox: @unchecked Sendable {
    let harness: UpstreamEngineHarness
    init(_ harness: UpstreamEngineHarness) { self.harness = harness }
}

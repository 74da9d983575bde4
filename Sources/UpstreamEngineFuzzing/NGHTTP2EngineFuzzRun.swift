#if NGHTTP2Engine
import NIOCore
import NIOEmbedded

/// One libFuzzer input for the libnghttp2 engine: arbitrary bytes from the server, cut into
/// reads, with requests in flight (some of which send another request from their completion,
/// re-entering the handler). A request completed twice, never, or after the close is a finding.
///
/// Input: byte 0 picks how many requests are in flight (1…16), byte 1 the size of the reads
/// (1…256), the rest is what the server sends. A valid empty SETTINGS comes first, so the
/// requests can start; the rest is the fuzzer's.
public struct NGHTTP2EngineFuzzRun {
    public let input: [UInt8]

    public init(input: UnsafeBufferPointer<UInt8>) {
        self.input = Array(input)
    }

    /// Runs the input; returns what went wrong, or `nil`.
    public func run() -> String? {
        guard self.input.count >= 2, let harness = try? NGHTTP2EngineHarness() else { return nil }
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
    let harness: NGHTTP2EngineHarness
    init(_ harness: NGHTTP2EngineHarness) { self.harness = harness }
}
#endif

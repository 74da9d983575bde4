import UpstreamAPNs
import UpstreamEngineFuzzing

/// libFuzzer entry point over the libnghttp2 engine's handler (see ``UpstreamEngineFuzzRun``).
/// Without the `NGHTTP2Engine` trait there is nothing to fuzz and each input is a no-op.
///
/// Build and run (docs/fuzzing.md):
/// `swift build -c release --scratch-path .build-fuzz --traits NGHTTP2Engine --sanitize=fuzzer --sanitize=address -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library --product UpstreamEngineFuzzer`
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzUpstreamEngine(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    #if NGHTTP2Engine
    let input = UnsafeBufferPointer(start: start, count: count)
    if let problem = UpstreamEngineFuzzRun(input: input, engine: .nghttp2).run() {
        fatalError(problem)
    }
    #endif
    return 0
}

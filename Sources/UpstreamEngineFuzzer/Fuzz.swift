import UpstreamEngineFuzzing

/// libFuzzer entry point over the libnghttp2 engine's handler (see ``NGHTTP2EngineFuzzRun``).
/// Without the `NGHTTP2Engine` trait there is nothing to fuzz and each input is a no-op.
///
/// Build and run (docs/fuzzing.md):
/// `swift build -c release --scratch-path .build-fuzz --traits NGHTTP2Engine --sanitize=fuzzer --sanitize=address -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library --product UpstreamEngineFuzzer`
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzUpstreamEngine(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    #if NGHTTP2Engine
    if let problem = NGHTTP2EngineFuzzRun(input: UnsafeBufferPointer(start: start, count: count)).run() {
        fatalError(problem)
    }
    #endif
    return 0
}

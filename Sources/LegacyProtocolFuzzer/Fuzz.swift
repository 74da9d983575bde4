import LegacyStreamFuzzing

/// libFuzzer entry point over the decoders and the session (see ``LegacyStreamFuzzRun``).
///
/// Build and run (docs/fuzzing.md):
/// `swift build -c release --scratch-path .build-fuzz --sanitize=fuzzer --sanitize=address -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library --product LegacyProtocolFuzzer`
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzLegacyStream(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    LegacyStreamFuzzRun(input: UnsafeBufferPointer(start: start, count: count)).run()
    return 0
}

import NIOCore
import ProxyProtocol

/// The PROXY protocol header parser over a fuzz input, in the reads the run cut it into: each
/// call answers a header (having consumed at most one header's bound), an error, or "more"
/// (having consumed nothing, and holding less than the longest header): a peer can never make
/// a listener hold more than that. A broken precondition is a finding.
enum ProxyHeaderFuzzCheck {
    static func run(_ bytes: Slice<UnsafeBufferPointer<UInt8>>, chunkSize: Int) {
        var buffer = ByteBuffer()
        var offset = bytes.startIndex
        while offset < bytes.endIndex {
            let end = min(offset + chunkSize, bytes.endIndex)
            buffer.writeBytes(bytes[offset..<end])
            offset = end
            let held = buffer.readableBytes
            let header: ProxyHeader?
            do {
                header = try ProxyHeaderParser.parse(&buffer)
            } catch {
                return
            }
            if header != nil {
                let consumed = held - buffer.readableBytes
                precondition(
                    consumed > 0 && consumed <= ProxyHeaderParser.maximumVersion2Length,
                    "a header of \(consumed) bytes"
                )
                return
            }
            precondition(buffer.readableBytes == held, "more was asked for, yet bytes were consumed")
            precondition(held < ProxyHeaderParser.maximumVersion2Length, "\(held) bytes held without an answer")
        }
    }
}

import NIOCore

/// First on a connection from a peer that is not a listed load balancer: a PROXY protocol header
/// there (a balancer added without listing it in `proxyProtocol.loadBalancers`) is refused as
/// what it is, not left for TLS to fail as a ClientHello of no known version. Anything else (a
/// ClientHello starts with 0x16) passes at its first byte, and the handler removes itself.
final class UnexpectedProxyHeaderHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    /// Version 1's `PROXY ` and version 2's signature, as far as it takes to tell them apart
    /// from TLS: six bytes.
    private static let version1 = Array("PROXY ".utf8)
    private static let version2: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D]

    private let refused: (_ version: Int) -> Void
    private var buffered: ByteBuffer?

    init(refused: @escaping (_ version: Int) -> Void) {
        self.refused = refused
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = self.unwrapInboundIn(data)
        if var earlier = self.buffered {
            earlier.writeBuffer(&bytes)
            bytes = earlier
        }
        let seen = Array(bytes.readableBytesView.prefix(6))
        for (version, signature) in [(1, Self.version1), (2, Self.version2)]
        where signature.starts(with: seen) || seen.starts(with: signature) {
            guard seen.count == signature.count else {
                self.buffered = bytes  // a prefix of a header so far: wait for the rest
                return
            }
            self.buffered = nil
            self.refused(version)
            context.close(promise: nil)
            return
        }
        self.buffered = nil
        context.fireChannelRead(self.wrapInboundOut(bytes))
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}

import NIOCore

/// Sits between TLS and `NIOHTTP2Handler` and, while the script says so, drops the client's
/// PING frames before HTTP/2 sees them, so they are never acknowledged (NIOHTTP2 answers PINGs
/// itself). Everything else passes through unchanged.
///
/// It follows the frame boundaries of the decrypted stream: the 24-byte client preface, then
/// frames of a 9-byte header (24-bit length, type, flags, stream id) and a payload. Runs of
/// frames are passed on as one slice; a PING is cut out of it only when it is to be dropped.
final class PingDroppingHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private static let prefaceLength = 24
    private static let frameHeaderLength = 9
    private static let pingType: UInt8 = 0x6

    private let shouldDrop: @Sendable () -> Bool
    private let onPing: @Sendable (_ dropped: Bool) -> Void
    private var buffer = ByteBuffer()
    private var prefaceSeen = false

    init(shouldDrop: @escaping @Sendable () -> Bool, onPing: @escaping @Sendable (_ dropped: Bool) -> Void) {
        self.shouldDrop = shouldDrop
        self.onPing = onPing
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var incoming = self.unwrapInboundIn(data)
        if self.buffer.readableBytes == 0 {
            self.buffer = incoming
        } else {
            self.buffer.writeBuffer(&incoming)
        }

        if !self.prefaceSeen {
            guard self.buffer.readableBytes >= Self.prefaceLength else { return }
            self.prefaceSeen = true
            let preface = self.buffer.readSlice(length: Self.prefaceLength)!
            context.fireChannelRead(self.wrapInboundOut(preface))
        }

        // Pass on complete frames; cut out PINGs to drop.
        var runStart = self.buffer.readerIndex
        var cursor = self.buffer.readerIndex
        while self.buffer.writerIndex - cursor >= Self.frameHeaderLength {
            let length =
                Int(self.buffer.getInteger(at: cursor, as: UInt8.self)!) << 16
                | Int(self.buffer.getInteger(at: cursor + 1, as: UInt16.self)!)
            let type = self.buffer.getInteger(at: cursor + 3, as: UInt8.self)!
            let flags = self.buffer.getInteger(at: cursor + 4, as: UInt8.self)!
            let end = cursor + Self.frameHeaderLength + length
            guard end <= self.buffer.writerIndex else { break }
            if type == Self.pingType, flags & 0x1 == 0 {
                let drop = self.shouldDrop()
                self.onPing(drop)
                if drop {
                    if cursor > runStart {
                        context.fireChannelRead(
                            self.wrapInboundOut(self.buffer.getSlice(at: runStart, length: cursor - runStart)!)
                        )
                    }
                    runStart = end
                }
            }
            cursor = end
        }
        if cursor > runStart {
            context.fireChannelRead(self.wrapInboundOut(self.buffer.getSlice(at: runStart, length: cursor - runStart)!))
        }
        self.buffer.moveReaderIndex(to: cursor)
        if self.buffer.readableBytes == 0 {
            self.buffer = ByteBuffer()
        } else {
            self.buffer.discardReadBytes()
        }
    }
}

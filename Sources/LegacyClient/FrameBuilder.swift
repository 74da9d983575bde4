import LegacyProtocol
import NIOCore

/// Byte-level builders for legacy frames, including malformed ones.
package enum FrameBuilder {
    /// A token of `length` bytes whose first bytes encode `seed`, so tokens are distinct.
    package static func token(_ seed: Int, length: Int = 32) -> ByteBuffer {
        var buffer = ByteBuffer()
        for index in 0..<length {
            buffer.writeInteger(UInt8(truncatingIfNeeded: index < 8 ? seed >> (8 * index) : index))
        }
        return buffer
    }

    package static func payload(_ text: String = #"{"aps":{"alert":"hello"}}"#) -> ByteBuffer {
        ByteBuffer(string: text)
    }

    package static func payload(length: Int) -> ByteBuffer {
        var buffer = ByteBuffer(string: #"{"aps":{"alert":""#)
        let filler = max(0, length - buffer.readableBytes - 3)
        buffer.writeRepeatingByte(UInt8(ascii: "x"), count: filler)
        buffer.writeString(#""}}"#)
        return buffer
    }

    package static func frame(
        _ command: NotificationFrame.Command,
        identifier: UInt32 = 0,
        expiration: UInt32 = 0,
        priority: UInt8 = 10,
        token: ByteBuffer,
        payload: ByteBuffer
    ) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeNotificationFrame(
            NotificationFrame(
                command: command,
                identifier: NotificationIdentifier(rawValue: identifier),
                expiration: expiration,
                priority: priority,
                deviceToken: token,
                payload: payload
            )
        )
        return buffer
    }

    /// One command-2 item, raw: `id`, a length (the data's own unless given), the data.
    package static func item(_ id: UInt8, _ data: ByteBuffer, length: UInt16? = nil) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(id)
        buffer.writeInteger(length ?? UInt16(data.readableBytes))
        buffer.writeImmutableBuffer(data)
        return buffer
    }

    package static func item(_ id: UInt8, integer: UInt32) -> ByteBuffer {
        self.item(id, ByteBuffer(integer: integer))
    }

    /// A command-2 frame around raw items; `frameLength` overrides the real length.
    package static func itemized(_ items: [ByteBuffer], frameLength: UInt32? = nil) -> ByteBuffer {
        var body = ByteBuffer()
        for item in items { body.writeImmutableBuffer(item) }
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt8(2))
        buffer.writeInteger(frameLength ?? UInt32(body.readableBytes))
        buffer.writeBuffer(&body)
        return buffer
    }
}

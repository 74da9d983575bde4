import Benchmark
import BenchmarkSupport
import LegacyProtocol
import NIOCore

// Decoding the legacy binary interface, one benchmark per command.
//
// Each iteration decodes 1,000 frames (a 32-byte token and a 200-byte payload each) from one
// buffer prepared outside the measurement. The decoder hands out slices of that buffer, so the
// target is 0 allocations per frame: `mallocCountTotal` is checked against Thresholds/.
// Throughput is frames per second (×1,000 per iteration, shown scaled).

/// How many frames one iteration decodes.
private let framesPerIteration = 1_000

/// `count` frames of one command in one buffer: distinct 32-byte tokens, 200-byte payloads.
private func stream(_ command: NotificationFrame.Command, count: Int) -> ByteBuffer {
    var payload = ByteBuffer(string: #"{"aps":{"alert":""#)
    payload.writeRepeatingByte(UInt8(ascii: "x"), count: 200 - payload.readableBytes - 3)
    payload.writeString(#""}}"#)
    var buffer = ByteBuffer()
    for index in 0..<count {
        var token = ByteBuffer()
        token.writeInteger(UInt64(index))
        token.writeRepeatingByte(0xAB, count: 24)
        buffer.writeNotificationFrame(
            NotificationFrame(
                command: command,
                identifier: NotificationIdentifier(rawValue: UInt32(index)),
                expiration: 1_900_000_000,
                priority: 10,
                deviceToken: token,
                payload: payload
            )
        )
    }
    return buffer
}

let benchmarks: @Sendable () -> Void = {
    for (name, command) in [("0", NotificationFrame.Command.simple), ("1", .enhanced), ("2", .itemized)] {
        let frames = stream(command, count: framesPerIteration)
        Benchmark("Decode command \(name) frames", configuration: apnsBridgeBenchmarkConfiguration()) { benchmark in
            // One pass over the stream: `framesPerIteration` frames, the scaled iterations.
            precondition(benchmark.scaledIterations.count == framesPerIteration)
            var decoder = NotificationFrameDecoder()
            var buffer = frames
            var decoded = 0
            while let frame = try decoder.decode(buffer: &buffer) {
                blackHole(frame)
                decoded += 1
            }
            precondition(decoded == framesPerIteration, "decoded \(decoded) frames")
        }
    }

    let packet = ErrorResponsePacket(status: .invalidToken, identifier: NotificationIdentifier(rawValue: 7))
    Benchmark("Encode error-response packets", configuration: apnsBridgeBenchmarkConfiguration()) { benchmark in
        var buffer = ByteBuffer()
        buffer.reserveCapacity(ErrorResponsePacket.length * framesPerIteration)
        benchmark.startMeasurement()
        for _ in 0..<framesPerIteration {
            blackHole(buffer.writeErrorResponse(packet))
        }
        benchmark.stopMeasurement()
        blackHole(buffer)
    }
}

import NIOCore

/// Application frames over Noise transport messages (Specs/sync-transport.md
/// §4): on the wire each Noise message has a 2-byte big-endian length; inside
/// the transport plaintexts each frame is a 4-byte big-endian length and its
/// bytes, split over as many plaintexts as it needs. The length 0xFFFFFFFF is
/// the close notify. No I/O here.
enum TransportFraming {
    /// Frame length value reserved for the close notify.
    static let closeNotify: UInt32 = .max

    static func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24), UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 8),
         UInt8(truncatingIfNeeded: value)]
    }

    /// One length-prefixed Noise message out of `buffer`, if it holds a whole
    /// one; `minimum` is the shortest length allowed (1 in the handshake, 16
    /// after it: a transport message carries at least its tag).
    static func nextMessage(_ buffer: inout ByteBuffer, minimum: Int) throws(SecureConnectionError) -> [UInt8]? {
        guard let length = buffer.getInteger(at: buffer.readerIndex, as: UInt16.self) else { return nil }
        guard Int(length) >= minimum else { throw .malformedMessage("a Noise message of \(length) bytes") }
        guard buffer.readableBytes >= 2 + Int(length) else { return nil }
        buffer.moveReaderIndex(forwardBy: 2)
        return buffer.readBytes(length: Int(length))
    }

    /// `messages`, each after its 2-byte length, in one buffer.
    static func encode(_ messages: [[UInt8]], allocator: ByteBufferAllocator) throws(SecureConnectionError) -> ByteBuffer {
        var buffer = allocator.buffer(capacity: messages.reduce(0) { $0 + $1.count + 2 })
        for message in messages {
            guard message.count <= SecureConnectionProtocol.maxNoiseMessage else {
                throw .malformedMessage("outgoing Noise message of \(message.count) bytes")
            }
            buffer.writeInteger(UInt16(message.count))
            buffer.writeBytes(message)
        }
        return buffer
    }
}

/// The transport plaintexts that carry one frame, in order: the first starts
/// with the frame's length, each holds at most `maxPlaintext` bytes. An empty
/// frame is one plaintext of its length alone.
struct FramePlaintexts: Sequence, IteratorProtocol {
    private let frame: [UInt8]
    private let maxPlaintext: Int
    private var offset = 0
    private var first = true

    init(_ frame: [UInt8], maxPlaintext: Int = SecureConnectionProtocol.maxNoisePlaintext) {
        self.frame = frame
        self.maxPlaintext = maxPlaintext
    }

    mutating func next() -> [UInt8]? {
        guard first || offset < frame.count else { return nil }
        var plaintext: [UInt8] = []
        if first { plaintext = TransportFraming.bigEndian(UInt32(frame.count)) }
        let take = Swift.min(maxPlaintext - plaintext.count, frame.count - offset)
        plaintext.append(contentsOf: frame[offset..<offset + take])
        offset += take
        first = false
        return plaintext
    }
}

/// Frames out of the transport plaintexts as they arrive, whatever the
/// split: a frame may span plaintexts, and a plaintext may hold several.
package struct FrameReassembler {
    package enum Output: Equatable {
        case frame([UInt8])
        /// The peer's close notify, the last thing it sends.
        case closeNotify
        /// The plaintexts break the framing; nothing after this is read.
        case invalid(SecureConnectionError)
    }

    package let maxFrameSize: Int
    private var header: [UInt8] = []
    private var body: [UInt8] = []
    /// Bytes still to come of the frame being read; nil while reading a length.
    private var remaining: Int?

    package init(maxFrameSize: Int) { self.maxFrameSize = maxFrameSize }

    /// What `plaintext` completes, in order; `.closeNotify` and `.invalid` end the output.
    package mutating func feed(_ plaintext: [UInt8]) -> [Output] {
        var out: [Output] = []
        var i = 0
        while i < plaintext.count {
            if let left = remaining {
                let take = min(left, plaintext.count - i)
                body.append(contentsOf: plaintext[i..<i + take])
                i += take
                remaining = left - take
            } else {
                let take = min(4 - header.count, plaintext.count - i)
                header.append(contentsOf: plaintext[i..<i + take])
                i += take
                guard header.count == 4 else { break }
                let length = header.withUnsafeBytes { UInt32(bigEndian: $0.loadUnaligned(as: UInt32.self)) }
                header.removeAll(keepingCapacity: true)
                if length == TransportFraming.closeNotify {
                    out.append(i == plaintext.count ? .closeNotify : .invalid(.malformedMessage("bytes after the close notify")))
                    return out
                }
                guard Int(length) <= maxFrameSize else {
                    out.append(.invalid(.frameTooLarge(size: Int(length), limit: maxFrameSize)))
                    return out
                }
                remaining = Int(length)
                body = []
                body.reserveCapacity(min(Int(length), 1 << 20))
            }
            if remaining == 0 {
                remaining = nil
                out.append(.frame(body))
                body = []
            }
        }
        return out
    }
}

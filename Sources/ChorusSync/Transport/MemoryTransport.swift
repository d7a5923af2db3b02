import ChorusCrypto
import Synchronization

/// Why a `MemoryTransport` call failed: thrown by `send` and `receive` once the
/// link is cut, and by `send` once either end closed.
package enum MemoryTransportError: Error, Sendable, Equatable {
    /// The connection was cut (a simulated network failure).
    case reset
    /// This end closed the transport.
    case closed
}

/// An in-memory `FrameTransport` pair for tests and embedders (two nodes in
/// one process). Each direction is a bounded queue of whole frames: `send`
/// waits while the queue is full, so a slow reader slows its writer exactly
/// as TCP would. `cut()` simulates a connection failure on both ends.
package struct MemoryTransport: FrameTransport {
    /// The node at the other end: the key given to `pair` and the address
    /// `memory:a` or `memory:b`.
    package let peer: PeerIdentity
    let outgoing: FrameQueue
    let incoming: FrameQueue
    let link: Link

    /// Shared by both ends: counts frames and cuts the connection when asked.
    final class Link: Sendable {
        let frames = Atomic<Int>(0)
        let cutAfter: Int?
        let queues: Mutex<[FrameQueue]> = Mutex([])
        init(cutAfter: Int?) { self.cutAfter = cutAfter }

        func cut() { for q in queues.withLock({ $0 }) { q.fail() } }
    }

    /// Two connected ends: the first is held by the node with key `a`, so its
    /// peer is `b`, and the other way round. `capacity` frames may be queued
    /// per direction; `cutAfterFrames` cuts the link once that many frames
    /// have been sent in total (both directions).
    package static func pair(
        _ a: PublicKey, _ b: PublicKey, capacity: Int = 16, cutAfterFrames: Int? = nil
    ) -> (MemoryTransport, MemoryTransport) {
        let ab = FrameQueue(capacity: capacity)
        let ba = FrameQueue(capacity: capacity)
        let link = Link(cutAfter: cutAfterFrames)
        link.queues.withLock { $0 = [ab, ba] }
        return (
            MemoryTransport(peer: PeerIdentity(key: b, address: "memory:b"), outgoing: ab, incoming: ba, link: link),
            MemoryTransport(peer: PeerIdentity(key: a, address: "memory:a"), outgoing: ba, incoming: ab, link: link)
        )
    }

    /// Queues one frame for the peer, waiting while this direction's queue is
    /// full. Throws `MemoryTransportError.reset` once the link is cut (or this
    /// frame passes `cutAfterFrames`), `.closed` once either end closed.
    package func send(_ frame: [UInt8]) async throws {
        if let limit = link.cutAfter {
            let n = link.frames.wrappingAdd(1, ordering: .relaxed).newValue
            if n > limit {
                link.cut()
                throw MemoryTransportError.reset
            }
        }
        try await outgoing.push(frame)
    }

    /// The next frame the peer sent; nil once the peer closed and every queued
    /// frame was read. Throws `MemoryTransportError.reset` once the link is
    /// cut.
    package func receive() async throws -> [UInt8]? { try await incoming.pop() }

    /// Closes this end cleanly: the peer reads what was sent, then nil.
    package func close() async {
        outgoing.finish()
        incoming.finish()
    }

    /// Cuts the connection: both ends fail their pending and later calls.
    package func cut() { link.cut() }
}

/// A bounded FIFO of frames with one reader.
final class FrameQueue: Sendable {
    private struct State {
        var frames: [[UInt8]] = []
        var head = 0
        var finished = false
        var failed = false
        var reader: CheckedContinuation<[UInt8]?, any Error>? = nil
        var writers: [(frame: [UInt8], continuation: CheckedContinuation<Void, any Error>)] = []
        var count: Int { frames.count - head }
    }

    private let state = Mutex(State())
    let capacity: Int

    init(capacity: Int) { self.capacity = max(1, capacity) }

    func push(_ frame: [UInt8]) async throws {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
            enum Action { case resumeReader(CheckedContinuation<[UInt8]?, any Error>), done, fail(MemoryTransportError), wait }
            let action: Action = state.withLock { s in
                if s.failed { return .fail(.reset) }
                if s.finished { return .fail(.closed) }
                if let reader = s.reader {
                    s.reader = nil
                    return .resumeReader(reader)
                }
                if s.count < capacity {
                    s.frames.append(frame)
                    return .done
                }
                s.writers.append((frame, c))
                return .wait
            }
            switch action {
            case .resumeReader(let reader):
                reader.resume(returning: frame)
                c.resume()
            case .done: c.resume()
            case .fail(let e): c.resume(throwing: e)
            case .wait: break
            }
        }
    }

    func pop() async throws -> [UInt8]? {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<[UInt8]?, any Error>) in
            enum Action { case value([UInt8], CheckedContinuation<Void, any Error>?), end, fail, wait }
            let action: Action = state.withLock { s in
                if s.failed { return .fail }
                if s.count > 0 {
                    let frame = s.frames[s.head]
                    s.head += 1
                    var woken: CheckedContinuation<Void, any Error>? = nil
                    if !s.writers.isEmpty {
                        let w = s.writers.removeFirst()
                        s.frames.append(w.frame)
                        woken = w.continuation
                    }
                    if s.head > 64 && s.head * 2 > s.frames.count {
                        s.frames.removeFirst(s.head)
                        s.head = 0
                    }
                    return .value(frame, woken)
                }
                if s.finished { return .end }
                s.reader = c
                return .wait
            }
            switch action {
            case .value(let frame, let woken):
                woken?.resume()
                c.resume(returning: frame)
            case .end: c.resume(returning: nil)
            case .fail: c.resume(throwing: MemoryTransportError.reset)
            case .wait: break
            }
        }
    }

    /// No more frames will be written: the reader drains what is queued,
    /// then reads nil; waiting writers fail.
    func finish() {
        let (reader, writers) = state.withLock { s -> (CheckedContinuation<[UInt8]?, any Error>?, [CheckedContinuation<Void, any Error>]) in
            s.finished = true
            let r = s.count == 0 ? s.reader : nil
            if r != nil { s.reader = nil }
            let w = s.writers.map(\.continuation)
            s.writers = []
            return (r, w)
        }
        reader?.resume(returning: nil)
        for w in writers { w.resume(throwing: MemoryTransportError.closed) }
    }

    /// The connection failed: everything pending and later fails.
    func fail() {
        let (reader, writers) = state.withLock { s -> (CheckedContinuation<[UInt8]?, any Error>?, [CheckedContinuation<Void, any Error>]) in
            s.failed = true
            let r = s.reader
            s.reader = nil
            let w = s.writers.map(\.continuation)
            s.writers = []
            s.frames = []
            s.head = 0
            return (r, w)
        }
        reader?.resume(throwing: MemoryTransportError.reset)
        for w in writers { w.resume(throwing: MemoryTransportError.reset) }
    }
}

extension MemoryTransportError {
    /// A stable, machine-readable name of the error, in snake case.
    package var code: String {
        switch self {
        case .reset: "connection_reset"
        case .closed: "closed"
        }
    }
}

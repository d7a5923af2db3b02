import CSodium
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Random nonces for XChaCha20-Poly1305 sealing, cut from operating-system
/// randomness fetched a block at a time (`randombytes_buf`).
///
/// Why: `randombytes_buf` is a system call per call, and for a 24-byte
/// nonce that call cost a quarter of sealing a chat message. A nonce is
/// public and must only never repeat under one key; bytes from the same
/// source handed out once each in order are as fresh as one call each.
///
/// What would repeat them is a child process continuing from a copy of an
/// unused block: `fork` bumps `forkGeneration` in the child
/// (`pthread_atfork`), which discards the block before its next use.
enum NoncePool {
    /// Bytes fetched at once: 170 nonces of 24 bytes.
    static let blockBytes = 4096

    private struct Block {
        var bytes = [UInt8](repeating: 0, count: NoncePool.blockBytes)
        /// The next unused byte; `blockBytes` when the block is used up.
        var next = NoncePool.blockBytes
        /// `forkGeneration` when the block was fetched.
        var generation: UInt64 = 0
    }

    private static let block = Mutex(Block())
    private static let forkGeneration = Atomic<UInt64>(0)
    /// Registers the fork handler once, before the first block is fetched.
    private static let forkHandlerRegistered: Bool = {
        pthread_atfork(nil, nil, { NoncePool.forkGeneration.add(1, ordering: .relaxed) }) == 0
    }()

    /// Writes `count` fresh random bytes (at most `blockBytes`) at `out`.
    static func fill(_ out: UnsafeMutableRawPointer, count: Int) {
        precondition(count > 0 && count <= blockBytes, "a nonce of \(count) bytes")
        requireSodium()
        guard forkHandlerRegistered else {
            // Without the handler a child could reuse a block: ask the
            // system each time instead.
            randombytes_buf(out, count)
            return
        }
        block.withLock { b in
            let generation = forkGeneration.load(ordering: .relaxed)
            if b.next + count > blockBytes || b.generation != generation {
                b.bytes.withUnsafeMutableBytes { if let base = $0.baseAddress { randombytes_buf(base, blockBytes) } }
                b.next = 0
                b.generation = generation
            }
            let start = b.next
            b.bytes.withUnsafeBytes { src in
                if let base = src.baseAddress { out.copyMemory(from: base + start, byteCount: count) }
            }
            // Spent bytes are overwritten so no later read of the block
            // (a core dump, a bug) hands the same nonce out twice.
            b.bytes.withUnsafeMutableBytes { buffer in
                if let base = buffer.baseAddress { (base + start).initializeMemory(as: UInt8.self, repeating: 0, count: count) }
            }
            b.next = start + count
        }
    }

    /// The `count` bytes the next `fill` would hand out, if it fetched no new
    /// block (tests: a forked child must not hand them out too).
    static func upcoming(_ count: Int) -> [UInt8]? {
        block.withLock { b in
            guard b.next + count <= blockBytes, b.generation == forkGeneration.load(ordering: .relaxed) else { return nil }
            return Array(b.bytes[b.next..<(b.next + count)])
        }
    }
}

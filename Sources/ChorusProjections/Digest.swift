import ChorusBlobs
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusParallel
import ChorusStorage
import Foundation

// The projections' digest (Specs/projections.md §8).
extension Projections {
    /// BLAKE2b-256 over the network configuration and every entry of the
    /// projected state in key order (Specs/projections.md §8).
    package func digest() throws -> Hash32 { try digest(splitAbove: Self.digestSplitEntries) }

    /// `digest()`, with the state's entries turned into the digest's stream
    /// in batches on threads of their own (`digestInParts`) when it holds
    /// more than `splitAbove` entries; in one read on this thread otherwise.
    package func digest(splitAbove: Int) throws -> Hash32 {
        try log.env.readSnapshot(count: Self.digestReaders) { txns in
            try txns[0].count(state) > splitAbove ? digestInParts(txns) : digest(in: txns[0])
        }
    }

    /// Read transactions a split digest takes (`digestInParts`): one walks
    /// the state, two turn its batches into streams on threads of their own.
    static let digestReaders = 3

    /// State entries past which `digest()` splits its work: a split costs a
    /// thread per batch, well under a millisecond each, which a small
    /// store's whole digest does not take.
    package static let digestSplitEntries = 50_000

    /// The digest of `digest()`, from transactions on one snapshot: the
    /// first reads the state's entries in key order, a batch at a time (a
    /// cheap walk); the others each turn a batch into its stream on a
    /// thread of their own (the costly part: a message's payloads and an
    /// edge's ids are read from the log, a message's record decoded and
    /// encoded), batch `i` with `txns[1 + i % (txns.count - 1)]`, whose
    /// previous batch is done by then (`pipelined`); the calling thread
    /// hashes the streams in order. The same stream as `digest(in:)`.
    func digestInParts(_ txns: [Transaction], batch: Int = Projections.digestBatch) throws -> Hash32 {
        guard txns.count > 2 else { return try digest(in: txns[0]) }
        let walker = txns[0]
        let readers = SnapshotReaders(Array(txns[1...]))
        let hasher = Blake2b.Hasher()
        hasher.update(digestPrefix)
        var noEffects: [(key: [UInt8], value: [UInt8])] = []
        var batches = 0
        typealias Batch = (index: Int, entries: [(key: [UInt8], value: [UInt8])])
        try pipelined(from: [UInt8]?.none, ahead: readers.count) { after -> (plan: Batch, next: [UInt8]??)? in
            var entries: [(key: [UInt8], value: [UInt8])] = []
            entries.reserveCapacity(batch)
            try scanStateInOrder(walker, after: after) { key, value in
                entries.append((key, value))
                return entries.count < batch
            }
            guard let last = entries.last else { return nil }
            batches += 1
            return ((batches - 1, entries), entries.count < batch ? nil : .some(last.key))
        } build: { [self] batch -> (stream: [UInt8], noEffects: [(key: [UInt8], value: [UInt8])]) in
            var stream = DigestStream()
            var found: [(key: [UInt8], value: [UInt8])] = []
            try stateEntries(batch.entries, in: readers[batch.index], noEffects: &found) { stream.append($0, $1) }
            return (stream.bytes, found)
        } consume: { part in
            hasher.update(part.stream)
            noEffects += part.noEffects
        }
        var stream = DigestStream()
        try Self.sortedNoEffects(noEffects) { stream.append($0, $1) }
        hasher.update(stream.bytes)
        return hasher.finish()
    }

    /// What a digest's stream starts with (§8): its domain and the network
    /// configuration's fingerprint.
    var digestPrefix: [UInt8] { Array("chorus/projections/v1".utf8) + [0] + config.fingerprint.bytes }

    /// State entries a batch of `digestInParts` holds.
    static let digestBatch = 8_192

    /// A digest's stream of §8: each entry as u64be(key length) ‖ key ‖
    /// u64be(value length) ‖ value.
    struct DigestStream {
        var bytes: [UInt8] = []

        mutating func append(_ key: [UInt8], _ value: [UInt8]) {
            withUnsafeBytes(of: UInt64(key.count).bigEndian) { bytes.append(contentsOf: $0) }
            bytes += key
            withUnsafeBytes(of: UInt64(value.count).bigEndian) { bytes.append(contentsOf: $0) }
            bytes += value
        }
    }

    /// Read transactions of one snapshot handed to the threads of a split
    /// read. `@unchecked Sendable`: LMDB lets a read transaction move
    /// between threads (`MDB_NOTLS`) as long as one uses it at a time,
    /// which the caller arranges.
    struct SnapshotReaders: @unchecked Sendable {
        private let txns: [Transaction]
        init(_ txns: [Transaction]) { self.txns = txns }
        var count: Int { txns.count }
        subscript(_ i: Int) -> Transaction { txns[i % txns.count] }
    }

    /// The digest of `digest()` inside the caller's transaction, so it covers
    /// state that transaction wrote (Specs/projections.md §8).
    package func digest(in txn: Transaction) throws -> Hash32 {
        let hasher = OrderedHashing()
        defer { hasher.stop() }
        try hasher.update(digestPrefix)
        // The entries' bytes are gathered and hashed a MiB at a time on
        // another thread while the scan gathers the next: the hash of a
        // stream does not depend on how it is cut, and most entries are a
        // few dozen bytes.
        let chunk = 1 << 20
        var pending = DigestStream()
        try scanState(in: txn) { key, value in
            pending.append(key, value)
            if pending.bytes.count >= chunk {
                try hasher.update(pending.bytes)
                pending = DigestStream()
            }
        }
        try hasher.update(pending.bytes)
        return try hasher.finish()
    }

    /// One BLAKE2b-256 stream fed in order, each part hashed on a thread of
    /// its own while the caller gathers the next (`Background`): a
    /// digest's scan and its hashing, each about half of its time on one
    /// core, overlap. `@unchecked Sendable`: one part is hashed at a time
    /// (each waits for the one before), and only the caller's thread calls
    /// in.
    final class OrderedHashing: @unchecked Sendable {
        private let hasher = Blake2b.Hasher()
        private var running: Background<Void>? = nil

        /// Hashes `bytes` after every part before it.
        func update(_ bytes: [UInt8]) throws {
            try running?.wait()
            running = Background { [self] in hasher.update(bytes) }
        }

        /// The hash of every part, once each is hashed.
        func finish() throws -> Hash32 {
            try running?.wait()
            running = nil
            return hasher.finish()
        }

        /// Waits for the part being hashed, if any (after a failed scan).
        func stop() { _ = try? running?.wait() }
    }

    /// Whether the `state` database read in `txn` holds exactly the entries
    /// of `other`'s read in `otherTxn`, byte for byte. Stored message
    /// entries name arrival positions (§9.1), so this is a comparison of
    /// records only between stores that hold the same log at the same
    /// positions (a copy as stored); there, equal stored state means equal
    /// digests, without expanding a message.
    package func storesSameState(in txn: Transaction, as other: Projections, in otherTxn: Transaction) throws -> Bool {
        try txn.hasSameEntries(state, as: other.state, in: otherTxn)
    }
}

import ChorusCBOR
import ChorusCrypto

/// A bucket of feeds whose fingerprints differ, split into its 16 children
/// (Specs/sync.md §4.2.1): `prefix` holds the bucket's author-key nibbles,
/// one per byte, and `fingerprints` the sender's 16 children's fingerprints
/// (8 bytes each, child 0 first).
package struct ReconcileSplit: Hashable, Sendable {
    /// The bucket's author-key nibbles, one per byte (0 to 63 of them).
    package var prefix: [UInt8]
    /// The sender's 16 child fingerprints, 8 bytes each, big-endian (128
    /// bytes).
    package var fingerprints: [UInt8]
    /// Builds a split; `SyncMessage.decode` checks the sizes of received ones.
    package init(prefix: [UInt8], fingerprints: [UInt8]) {
        self.prefix = prefix
        self.fingerprints = fingerprints
    }
}

/// A small bucket whose fingerprints differ: the sender's item digests
/// (8 bytes each, ascending), or nil when it holds more than
/// `Reconciler.maxLeafItems` feeds there and announces them all instead.
package struct ReconcileLeaf: Hashable, Sendable {
    /// The bucket's author-key nibbles, one per byte (1 to 64 of them).
    package var prefix: [UInt8]
    /// The sender's digests of its items in the bucket, ascending, 8 bytes
    /// each; nil when it holds more than `Reconciler.maxLeafItems` there.
    package var digests: [UInt8]?
    /// Builds a leaf; `SyncMessage.decode` checks the sizes of received ones.
    package init(prefix: [UInt8], digests: [UInt8]?) {
        self.prefix = prefix
        self.digests = digests
    }
}

/// One round of range-based reconciliation over feed heads.
package struct ReconcileRound: Hashable, Sendable {
    /// How many feeds the sender holds.
    package var count: UInt64
    /// The buckets this round splits into their 16 children, in order.
    package var splits: [ReconcileSplit]
    /// The buckets at leaf depth this round, with the sender's digests, in
    /// order.
    package var leaves: [ReconcileLeaf]
    /// Builds a round (`reconcile`, Specs/sync.md §4.2.1);
    /// `Reconciler.receive(_:)` checks that the peer's round lists the same
    /// buckets.
    package init(count: UInt64, splits: [ReconcileSplit], leaves: [ReconcileLeaf]) {
        self.count = count
        self.splits = splits
        self.leaves = leaves
    }
}

/// Range-based set reconciliation of two nodes' feed heads (Specs/sync.md
/// §4.2.1), apart from any transport: both sides run one each, send
/// `firstRound()`, and feed every round the peer sends to `receive(_:)`,
/// which says which heads to announce and what to send next. Both sides
/// reach the same decisions from the same two messages, so rounds stay in
/// step without either side leading.
package struct Reconciler: Sendable {
    /// Feeds per leaf bucket the tree depth aims at.
    package static let leafTarget = 4
    /// A leaf with more feeds than this is announced whole instead of by digests.
    package static let maxLeafItems = 1024
    /// A round with more buckets than this ends the reconciliation: every
    /// feed in those buckets is announced (the sets differ too much for
    /// fingerprints to pay).
    package static let maxBucketsPerRound = 1024
    /// Bytes of one digest or fingerprint on the wire (a big-endian 64-bit
    /// number).
    package static let digestBytes = 8

    let heads: [FeedAnnouncement]
    let digests: [UInt64]
    /// The depth of leaf buckets, fixed after the first round.
    private var leafDepth = 0
    private var sent: ReconcileRound? = nil

    /// Prepares one side's reconciliation of its feed heads (the head of each
    /// feed it holds).
    package init(heads: [FeedAnnouncement]) {
        self.heads = heads.sorted { $0.author < $1.author }
        self.digests = self.heads.map(Self.digest)
    }

    /// The first 8 bytes, big-endian, of BLAKE2b-256("chorus/reconcile/v1" ‖
    /// 0x00 ‖ author ‖ u64be(seq) ‖ head id).
    package static func digest(_ h: FeedAnnouncement) -> UInt64 {
        var seq = [UInt8](repeating: 0, count: 8)
        for i in 0..<8 { seq[i] = UInt8(truncatingIfNeeded: h.seq >> (56 - 8 * UInt64(i))) }
        let hash = Blake2b.hash256(parts: [Array("chorus/reconcile/v1".utf8), [0], h.author.bytes, seq, h.head.bytes])
        return hash.bytes.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
    }

    /// The first round (Specs/sync.md §4.2.1 step 1): this side's feed count
    /// and one split of the empty prefix, with no leaves.
    package mutating func firstRound() -> ReconcileRound {
        let round = ReconcileRound(
            count: UInt64(heads.count), splits: [ReconcileSplit(prefix: [], fingerprints: childFingerprints([]))], leaves: [])
        sent = round
        return round
    }

    /// Compares the peer's round with the one this side sent. Returns the
    /// heads to announce (`have`) and the next round, or nil when the
    /// reconciliation is over (then `haveEnd` follows the heads).
    package mutating func receive(_ peer: ReconcileRound) throws(SyncError) -> (announce: [FeedAnnouncement], next: ReconcileRound?) {
        guard let mine = sent else { throw .unexpected("a reconcile round before this side's first") }
        guard peer.splits.map(\.prefix) == mine.splits.map(\.prefix), peer.leaves.map(\.prefix) == mine.leaves.map(\.prefix) else {
            throw .unexpected("a reconcile round that lists other buckets than this side's")
        }
        if leafDepth == 0 {
            let n = max(UInt64(heads.count), peer.count)
            var depth = 1
            var capacity = UInt64(16 * Self.leafTarget)
            while capacity < n, depth < 64 {
                depth += 1
                capacity = capacity > UInt64.max / 16 ? UInt64.max : capacity * 16
            }
            leafDepth = depth
        }
        var announce: [FeedAnnouncement] = []
        for (own, theirs) in zip(mine.leaves, peer.leaves) {
            let range = bucket(own.prefix)
            if own.digests != nil, let peerDigests = theirs.digests {
                let known = Set(Self.words(peerDigests))
                for i in range where !known.contains(digests[i]) { announce.append(heads[i]) }
            } else {
                announce += heads[range]
            }
        }
        var splits: [[UInt8]] = []
        var leaves: [[UInt8]] = []
        for (own, theirs) in zip(mine.splits, peer.splits) {
            for child in 0..<16 {
                let at = child * Self.digestBytes..<(child + 1) * Self.digestBytes
                guard own.fingerprints[at] != theirs.fingerprints[at] else { continue }
                let prefix = own.prefix + [UInt8(child)]
                if prefix.count >= leafDepth { leaves.append(prefix) } else { splits.append(prefix) }
            }
        }
        if splits.isEmpty && leaves.isEmpty {
            sent = nil
            return (announce, nil)
        }
        if splits.count + leaves.count > Self.maxBucketsPerRound {
            for prefix in splits + leaves { announce += heads[bucket(prefix)] }
            sent = nil
            return (announce, nil)
        }
        let next = ReconcileRound(
            count: UInt64(heads.count),
            splits: splits.map { ReconcileSplit(prefix: $0, fingerprints: childFingerprints($0)) },
            leaves: leaves.map { prefix in
                let range = bucket(prefix)
                guard range.count <= Self.maxLeafItems else { return ReconcileLeaf(prefix: prefix, digests: nil) }
                return ReconcileLeaf(prefix: prefix, digests: Self.bytes(digests[range].sorted()))
            })
        sent = next
        return (announce, next)
    }

    /// The XOR of the digests of each of the 16 children of `prefix`.
    func childFingerprints(_ prefix: [UInt8]) -> [UInt8] {
        var out: [UInt64] = []
        out.reserveCapacity(16)
        for child in 0..<16 {
            out.append(digests[bucket(prefix + [UInt8(child)])].reduce(0, ^))
        }
        return Self.bytes(out)
    }

    /// The indexes of the heads whose author starts with the nibbles `prefix`.
    func bucket(_ prefix: [UInt8]) -> Range<Int> {
        func compare(_ key: PublicKey) -> Int {
            for (i, nibble) in prefix.enumerated() {
                let byte = key.bytes[i / 2]
                let n = i % 2 == 0 ? byte >> 4 : byte & 0x0F
                if n != nibble { return n < nibble ? -1 : 1 }
            }
            return 0
        }
        // First index not below the prefix, then first index above it.
        var lo = 0, hi = heads.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if compare(heads[mid].author) < 0 { lo = mid + 1 } else { hi = mid }
        }
        let start = lo
        hi = heads.count
        while lo < hi {
            let mid = (lo + hi) / 2
            if compare(heads[mid].author) <= 0 { lo = mid + 1 } else { hi = mid }
        }
        return start..<lo
    }

    /// The words as 8-byte big-endian values, concatenated: the wire form of
    /// digests, fingerprints and sketch sums.
    package static func bytes(_ words: [UInt64]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(words.count * 8)
        for w in words { for i in 0..<8 { out.append(UInt8(truncatingIfNeeded: w >> (56 - 8 * UInt64(i)))) } }
        return out
    }

    static func words(_ bytes: [UInt8]) -> [UInt64] {
        stride(from: 0, to: bytes.count - bytes.count % 8, by: 8).map { start in
            bytes[start..<start + 8].reduce(0) { $0 << 8 | UInt64($1) }
        }
    }
}

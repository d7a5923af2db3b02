import CGF64
import ChorusCrypto
import ChorusParallel
import Foundation

/// One side's feed heads as elements of a sketch (Specs/sync.md §4.2.2): each
/// feed is a point `tag` (from the session's salt and its author) carrying
/// a `value` (its height and the first three bytes of its head id). The
/// sketch of a set is its power sums s_j = Σ value·tag^j; the sums of two
/// sides added together are those of the feeds whose values differ, which
/// a decoder finds with Berlekamp–Massey and root finding like a
/// Reed–Solomon decoder finds errors.
package struct FeedSketch: Sendable {
    /// Heights at or above 2^40 do not fit a value: such a side gives up.
    package static let maxSeq: UInt64 = 1 << 40

    /// One feed as an element of the sketch: its head, and the tag and value
    /// derived from it.
    package struct Item: Sendable {
        /// The feed's author key.
        package var author: PublicKey
        /// The feed's height (1 ≤ seq < `maxSeq`).
        package var seq: UInt64
        /// The id of the feed's head event.
        package var head: EventID
        /// The feed's point in GF(2^64), from the salt and its author
        /// (`tag(salt:author:)`); nonzero and unique in the set.
        package var tag: UInt64
        /// The feed's height and head prefix as one element
        /// (`value(seq:head:)`).
        package var value: UInt64
    }

    /// The session's 16-byte salt, derived from both sides' nonces
    /// (Specs/sync.md §4.2.2).
    package let salt: [UInt8]
    /// Sorted by author.
    package let items: [Item]
    /// The item index of each tag.
    let byTag: [UInt64: Int]
    /// The items' tags and values, as the sums read them.
    private let tags: [UInt64], values: [UInt64]
    /// Syndromes s_1 … s_(count) computed so far, and each item's tag^count.
    package private(set) var syndromes: [UInt64] = []
    private var powers: [UInt64]

    /// Nil when two feeds share a tag, a tag is zero or a height does not
    /// fit (all but impossible by chance; then the side gives up).
    package init?(heads: [FeedAnnouncement], salt: [UInt8]) {
        self.salt = salt
        let sorted = heads.sorted(by: { $0.author < $1.author })
        // Hashing every head is most of a sketch's setup: on all cores.
        let tags = parallelMap(sorted, chunk: 1024) { Self.tag(salt: salt, author: $0.author) }
        var items: [Item] = []
        items.reserveCapacity(sorted.count)
        var byTag: [UInt64: Int] = [:]
        byTag.reserveCapacity(sorted.count)
        for (h, tag) in zip(sorted, tags) {
            guard h.seq >= 1, h.seq < Self.maxSeq else { return nil }
            guard tag != 0, byTag[tag] == nil else { return nil }
            byTag[tag] = items.count
            items.append(Item(author: h.author, seq: h.seq, head: h.head, tag: tag, value: Self.value(seq: h.seq, head: h.head)))
        }
        self.items = items
        self.byTag = byTag
        self.tags = items.map(\.tag)
        values = items.map(\.value)
        checksum = parallelMap(items, chunk: 1024) { Self.check(salt: salt, tag: $0.tag, value: $0.value) }.reduce(0, &+)
        powers = items.map { _ in 1 }
    }

    /// The first 8 bytes, big-endian, of BLAKE2b-256(salt ‖ author).
    package static func tag(salt: [UInt8], author: PublicKey) -> UInt64 {
        Self.word(Blake2b.hash256(parts: [salt, author.bytes]).bytes)
    }

    /// seq · 2^24 + the first three bytes of the head id, big-endian.
    package static func value(seq: UInt64, head: EventID) -> UInt64 {
        seq << 24 | UInt64(head.bytes[0]) << 16 | UInt64(head.bytes[1]) << 8 | UInt64(head.bytes[2])
    }

    /// The first 8 bytes, big-endian, of BLAKE2b-256("chorus/sketch/check/v1"
    /// ‖ 0x00 ‖ salt ‖ u64be(tag) ‖ u64be(value)).
    package static func check(salt: [UInt8], tag: UInt64, value: UInt64) -> UInt64 {
        word(Blake2b.hash256(parts: [Array("chorus/sketch/check/v1".utf8), [0], salt, bytes([tag]), bytes([value])]).bytes)
    }

    /// The sum modulo 2^64 of every item's check: what a decoder compares
    /// with the difference it found applied to its own sum.
    package let checksum: UInt64

    /// The item with this tag, or nil when this side holds no such feed.
    package func item(tag: UInt64) -> Item? { byTag[tag].map { items[$0] } }

    /// Extends the syndromes to s_1 … s_n, the items split over all cores.
    package mutating func extend(to n: Int) {
        guard n > syndromes.count else { return }
        let count = n - syndromes.count
        let tags = self.tags, values = self.values, start = powers
        let parts = max(1, min(ProcessInfo.processInfo.activeProcessorCount, items.count / 256))
        let ranges = (0..<parts).map { p in (items.count * p / parts)..<(items.count * (p + 1) / parts) }
        let partial = parallelMap(ranges, chunk: 1) { range -> (sums: [UInt64], powers: [UInt64]) in
            let t = Array(tags[range]), v = Array(values[range])
            var p = Array(start[range])
            var sums = [UInt64](repeating: 0, count: count)
            t.withUnsafeBufferPointer { tb in
                v.withUnsafeBufferPointer { vb in
                    p.withUnsafeMutableBufferPointer { pb in
                        sums.withUnsafeMutableBufferPointer { sb in
                            guard let tp = tb.baseAddress, let vp = vb.baseAddress, let pp = pb.baseAddress, let sp = sb.baseAddress else { return }
                            chorus_gf64_sums(tp, vp, pp, tb.count, sp, count)
                        }
                    }
                }
            }
            return (sums, p)
        }
        var total = [UInt64](repeating: 0, count: count)
        for (range, part) in zip(ranges, partial) {
            for k in 0..<count { total[k] ^= part.sums[k] }
            powers.replaceSubrange(range, with: part.powers)
        }
        syndromes += total
    }

    /// One element of the difference: a feed whose values differ, with
    /// `error` = the two values added (XOR).
    package struct Difference: Hashable, Sendable {
        /// The tag of the feed whose values differ.
        package var tag: UInt64
        /// The two sides' values added (XOR); a side without the feed counts
        /// value 0.
        package var error: UInt64
    }

    /// The unique set of at most `capacity` (tag, error) pairs whose power
    /// sums are `sums[0…]` = s_1 … s_2t (t = sums.count / 2), ascending by
    /// tag; nil when there is none (the sets differ in more feeds).
    /// `candidates` are tags likely among the roots (the decoder's own):
    /// trying them first leaves the general root finding only the rest.
    /// Unless `last`, a difference of exactly t feeds is not decoded (more
    /// sums settle it): that is what more than t differences look like, and
    /// telling them apart costs the root finding.
    package static func decode(_ sums: [UInt64], candidates: [UInt64] = [], last: Bool = true) -> [Difference]? {
        let capacity = sums.count / 2
        guard sums.contains(where: { $0 != 0 }) else { return [] }
        // Berlekamp–Massey: the shortest Λ(x) = 1 + λ1·x + … with
        // Σ λk·s(n−k) = 0 for every n.
        var lambda: [UInt64] = [1], previous: [UInt64] = [1]
        var length = 0, gap = 1
        var previousDiscrepancy: UInt64 = 1
        for n in 0..<(2 * capacity) {
            var d = sums[n]
            for k in 1..<min(lambda.count, length + 1) { d ^= GF64.mul(lambda[k], sums[n - k]) }
            if d == 0 {
                gap += 1
                continue
            }
            let factor = GF64.mul(d, GF64.inverse(previousDiscrepancy))
            var next = lambda
            if next.count < previous.count + gap { next += [UInt64](repeating: 0, count: previous.count + gap - next.count) }
            for (k, b) in previous.enumerated() { next[k + gap] ^= GF64.mul(factor, b) }
            if 2 * length <= n {
                previous = lambda
                length = n + 1 - length
                previousDiscrepancy = d
                gap = 1
            } else {
                gap += 1
            }
            lambda = next
        }
        while lambda.count > length + 1, lambda.last == 0 { lambda.removeLast() }
        guard length >= 1, length < capacity || (last && length == capacity), lambda.count == length + 1, lambda[length] != 0 else { return nil }
        // The tags are the roots of the reversed polynomial Π (x − tag).
        var locator = GF64Polynomial(lambda.reversed())
        var tags: [UInt64] = []
        for x in locator.zeros(among: candidates) where locator.degree >= 1 {
            tags.append(x)
            locator = locator.quotient(GF64Polynomial([x, 1]))
        }
        guard let rest = locator.distinctRoots() else { return nil }
        tags += rest
        guard tags.count == length, Set(tags).count == length, !tags.contains(0) else { return nil }
        // Forney: error = Ω(1/tag) / Λ'(1/tag), Ω = S(x)·Λ(x) mod x^2t.
        let lambdaPoly = GF64Polynomial(lambda)
        let omega = GF64Polynomial(Array(GF64Polynomial(sums).times(lambdaPoly).c.prefix(2 * capacity)))
        let derivative = GF64Polynomial(lambda.enumerated().dropFirst().map { $0.offset % 2 == 1 ? $0.element : 0 })
        var out: [Difference] = []
        for tag in tags {
            let inv = GF64.inverse(tag)
            let denominator = derivative.evaluate(inv)
            guard denominator != 0 else { return nil }
            let error = GF64.mul(omega.evaluate(inv), GF64.inverse(denominator))
            guard error != 0 else { return nil }
            out.append(Difference(tag: tag, error: error))
        }
        // The pairs must reproduce every sum (they do when the algebra holds;
        // this guards the implementation as much as the input).
        var powers = out.map(\.tag)
        for s in sums {
            var sum: UInt64 = 0
            for (i, d) in out.enumerated() {
                sum ^= GF64.mul(d.error, powers[i])
                powers[i] = GF64.mul(powers[i], d.tag)
            }
            guard sum == s else { return nil }
        }
        return out.sorted { $0.tag < $1.tag }
    }

    static func word(_ bytes: [UInt8]) -> UInt64 { bytes.prefix(8).reduce(0) { $0 << 8 | UInt64($1) } }

    static func bytes(_ words: [UInt64]) -> [UInt8] { Reconciler.bytes(words) }
}

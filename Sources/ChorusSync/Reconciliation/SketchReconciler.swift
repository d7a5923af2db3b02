import ChorusCrypto

/// A side's opening of sketch reconciliation (`sketchInfo`, Specs/sync.md §4.2.2).
package struct SketchInfo: Hashable, Sendable {
    /// How many feeds the sender holds.
    package var count: UInt64
    /// The sum of their heights (modulo 2^64).
    package var total: UInt64
    /// 16 bytes naming the sender's set of heads exactly.
    package var setHash: [UInt8]
    /// 16 random bytes; both nonces salt the session's tags.
    package var nonce: [UInt8]
    /// Builds a `sketchInfo`; `SyncMessage.decode` checks the 16-byte set hash
    /// and nonce of received ones.
    package init(count: UInt64, total: UInt64, setHash: [UInt8], nonce: [UInt8]) {
        self.count = count
        self.total = total
        self.setHash = setHash
        self.nonce = nonce
    }
}

/// The sketcher's power sums for one round (`sketch`).
package struct SketchSums: Hashable, Sendable {
    /// The sketcher's checksum of its items (the same in every round).
    package var checksum: UInt64
    /// The round's new sums, continuing where the previous round stopped.
    package var sums: [UInt64]
    /// Builds one round of sums; the decoder checks their number against the
    /// round's capacity.
    package init(checksum: UInt64, sums: [UInt64]) {
        self.checksum = checksum
        self.sums = sums
    }
}

/// The answer to a round (`sketchResult`): more sums, the difference found,
/// or the end of sketching (both sides then fall back).
package struct SketchResult: Hashable, Sendable {
    /// The decoder's answer to a round: `more` sums needed (0), the difference
    /// `found` (1), or `giveUp` (2), after which both sides fall back.
    package enum Outcome: UInt64, Sendable { case more = 0, found = 1, giveUp = 2 }
    /// What the decoder decided for this round.
    package var outcome: Outcome
    /// Tags of feeds the decoder lacks: the sketcher announces them.
    package var asks: [UInt64]
    /// How many events the decoder pushes next (then `eventsEnd`); 0: none.
    package var push: UInt64
    /// Builds a result; only a `found` result may carry asks or a push
    /// (`SyncMessage.decode` refuses others).
    package init(outcome: Outcome, asks: [UInt64] = [], push: UInt64 = 0) {
        self.outcome = outcome
        self.asks = asks
        self.push = push
    }
}

/// Sketch reconciliation of two nodes' feed heads (Specs/sync.md §4.2.2),
/// apart from any transport. Both sides send `info()` and pass the peer's to
/// `start(peer:)`, which settles the roles: the **sketcher** sends power sums
/// round by round, growing; the **decoder** adds its own, decodes the
/// difference, and alone decides what moves: it pushes the events the
/// sketcher lacks, asks for the feeds it lacks entirely, and requests the
/// heights it lacks. The sketcher's part costs 16 bytes per differing feed,
/// whatever the number of feeds.
package struct SketchReconciler: Sendable {
    /// The largest capacity of a round: at most 1024 differing feeds can be
    /// decoded, from 2048 sums.
    package static let maxCapacity = 1024
    /// The smallest first capacity, so that a few differences decode in one
    /// round.
    package static let minCapacity = 8
    /// Length in bytes of each side's random nonce in `sketchInfo`.
    package static let nonceBytes = 16

    /// This side's part, settled by `start(peer:)`: the side with the smaller
    /// height total (then the smaller device key) sketches, the other decodes.
    package enum Role: Sendable { case sketcher, decoder }

    /// What to do once both sides' `sketchInfo` are known.
    package enum Start: Sendable {
        /// The two sets are the same: nothing to announce.
        case identical
        /// Sketching does not pay or cannot run: fall back (§4.2.2).
        case fallBack
        /// This side sketches: send these sums (or, when nil, give up).
        case sketch(SketchSums?)
        /// This side decodes: wait for the sums.
        case decode
    }

    /// What the decoder does with the difference.
    package struct Plan: Hashable, Sendable {
        /// Tags of feeds only the sketcher holds.
        package var asks: [UInt64] = []
        /// Ranges to send the sketcher unasked (prev nil: `from` follows the
        /// sketcher's head, or is fork evidence at its height).
        package var pushes: [FeedRange] = []
        /// The sketcher's heights of feeds where it holds more or another
        /// head; the head id is unknown (zero).
        package var wants: [FeedAnnouncement] = []
    }

    /// The decoder's next step after a round of sums.
    package enum DecoderStep: Sendable {
        /// Send this result: `more` (wait for the next round) or `giveUp` (fall
        /// back).
        case reply(SketchResult)
        /// Send this `found` result, then act on the plan: push its ranges and
        /// request its heights.
        case found(SketchResult, Plan)
    }

    /// The sketcher's next step after the decoder's answer.
    package enum SketcherStep: Sendable {
        /// Send these further sums, for a capacity twice the last.
        case next(SketchSums)
        /// The decoder found the difference: announce these heads (its asks),
        /// then accept `push` pushed events.
        case found(announce: [FeedAnnouncement], push: UInt64)
        /// Sketching ended without a result: both sides fall back
        /// (Specs/sync.md §4.2.2).
        case giveUp
    }

    let heads: [FeedAnnouncement]
    let nonce: [UInt8]
    let ownInfo: SketchInfo
    let device: PublicKey
    let peerDevice: PublicKey
    /// This side's role; nil until `start(peer:)` picks one, and left nil when
    /// the sets are identical or sketching falls back at once.
    package private(set) var role: Role? = nil
    private var sketch: FeedSketch? = nil
    /// Capacity of the last round sent or received.
    package private(set) var capacity = 0
    private var peerSums: [UInt64] = []
    private var peerChecksum: UInt64? = nil
    private var finished = false

    /// Prepares one side's reconciliation of its feed heads with a fresh
    /// `nonce` of `nonceBytes` random bytes; the two device keys settle the
    /// roles when the height totals are equal.
    package init(heads: [FeedAnnouncement], nonce: [UInt8], device: PublicKey, peerDevice: PublicKey) {
        self.heads = heads.sorted { $0.author < $1.author }
        self.nonce = nonce
        ownInfo = Self.info(of: self.heads, nonce: nonce)
        self.device = device
        self.peerDevice = peerDevice
    }

    /// This side's `sketchInfo`: its feed count, height total, set hash and
    /// nonce.
    package func info() -> SketchInfo { ownInfo }

    /// Hashes every head once, at construction.
    static func info(of heads: [FeedAnnouncement], nonce: [UInt8]) -> SketchInfo {
        var data = Array("chorus/sketch/set/v1".utf8) + [0]
        data.reserveCapacity(data.count + heads.count * 72)
        for h in heads { data += h.author.bytes + FeedSketch.bytes([h.seq]) + h.head.bytes }
        let total = heads.reduce(UInt64(0)) { $0 &+ $1.seq }
        return SketchInfo(count: UInt64(heads.count), total: total, setHash: Array(Blake2b.hash256(data).bytes.prefix(16)), nonce: nonce)
    }

    /// The first capacity: the count and height differences, plus a margin.
    static func firstCapacity(_ a: SketchInfo, _ b: SketchInfo) -> Int {
        let dc = a.count > b.count ? a.count - b.count : b.count - a.count
        let dt = a.total > b.total ? a.total - b.total : b.total - a.total
        // No more feeds can differ than the two sides hold together.
        let (e, overflow) = dc.addingReportingOverflow(dt)
        let union = a.count &+ b.count
        let estimate = min(overflow ? UInt64.max : e, union < a.count ? UInt64.max : union, UInt64(maxCapacity))
        return Int(min(UInt64(maxCapacity), max(UInt64(minCapacity), estimate + (estimate + 15) / 16 + 4)))
    }

    /// Compares the two `sketchInfo`s and settles what follows: the sets are
    /// identical, the counts differ by more than `maxCapacity` (fall back), or
    /// this side sketches (with its first sums) or decodes.
    package mutating func start(peer: SketchInfo) -> Start {
        let mine = ownInfo
        if mine.count == peer.count, mine.setHash == peer.setHash {
            finished = true
            return .identical
        }
        let dc = mine.count > peer.count ? mine.count - peer.count : peer.count - mine.count
        if dc > UInt64(Self.maxCapacity) {
            finished = true
            return .fallBack
        }
        let sketcher = (mine.total, device) < (peer.total, peerDevice)
        let (first, second) = sketcher ? (nonce, peer.nonce) : (peer.nonce, nonce)
        let salt = Array(Blake2b.hash256(parts: [Array("chorus/sketch/salt/v1".utf8), [0], first, second]).bytes.prefix(16))
        sketch = FeedSketch(heads: heads, salt: salt)
        capacity = Self.firstCapacity(mine, peer)
        guard sketcher else {
            role = .decoder
            return .decode
        }
        role = .sketcher
        guard sketch != nil else {
            finished = true
            return .sketch(nil)
        }
        return .sketch(nextSums(from: 0))
    }

    private mutating func nextSums(from done: Int) -> SketchSums {
        guard var s = sketch else { return SketchSums(checksum: 0, sums: []) }
        s.extend(to: 2 * capacity)
        sketch = s
        return SketchSums(checksum: s.checksum, sums: Array(s.syndromes[done..<2 * capacity]))
    }

    // MARK: Decoder

    /// A round of sums: decode, or ask for more, or give up.
    package mutating func receive(_ round: SketchSums, store: some FeedLookup) throws -> DecoderStep {
        guard role == .decoder, !finished else { throw SyncError.unexpected("sketch sums to a side that does not decode") }
        guard round.sums.count == 2 * capacity - peerSums.count else {
            throw SyncError.unexpected("\(round.sums.count) sketch sums where \(2 * capacity - peerSums.count) were due")
        }
        if let c = peerChecksum, c != round.checksum { throw SyncError.unexpected("a sketch checksum that changed between rounds") }
        peerChecksum = round.checksum
        peerSums += round.sums
        guard var s = sketch else {
            finished = true
            return .reply(SketchResult(outcome: .giveUp))
        }
        s.extend(to: 2 * capacity)
        sketch = s
        let sums = zip(s.syndromes, peerSums).map { $0 ^ $1 }
        let last = capacity >= Self.maxCapacity
        if let difference = FeedSketch.decode(sums, candidates: s.items.map(\.tag), last: last), let plan = try plan(difference, sketch: s, store: store) {
            finished = true
            let pushed = plan.pushes.reduce(UInt64(0)) { $0 &+ ($1.to - $1.from + 1) }
            return .found(SketchResult(outcome: .found, asks: plan.asks, push: pushed), plan)
        }
        if capacity >= Self.maxCapacity {
            finished = true
            return .reply(SketchResult(outcome: .giveUp))
        }
        capacity = min(Self.maxCapacity, 2 * capacity)
        return .reply(SketchResult(outcome: .more))
    }

    /// The decoder's decisions (§4.2.2 "Acting on the difference"), or nil
    /// when the difference does not check out against the sketcher's sum.
    func plan(_ difference: [FeedSketch.Difference], sketch s: FeedSketch, store: some FeedLookup) throws -> Plan? {
        var check = s.checksum
        var plan = Plan()
        for d in difference {
            let own = s.item(tag: d.tag)
            let theirs = d.error ^ (own?.value ?? 0)
            let theirSeq = theirs >> 24
            guard theirs == 0 || theirSeq >= 1 else { return nil }
            if let own { check &-= FeedSketch.check(salt: s.salt, tag: d.tag, value: own.value) }
            if theirs != 0 { check &+= FeedSketch.check(salt: s.salt, tag: d.tag, value: theirs) }
            guard let own else {
                plan.asks.append(d.tag)
                continue
            }
            let author = own.author
            if theirs == 0 {
                plan.pushes.append(FeedRange(author: author, from: 1, prev: nil, to: own.seq))
            } else if theirSeq < own.seq {
                let id = try store.eventID(of: author, at: theirSeq)
                if let id, FeedSketch.value(seq: theirSeq, head: id) == theirs {
                    plan.pushes.append(FeedRange(author: author, from: theirSeq + 1, prev: nil, to: own.seq))
                } else {
                    plan.pushes.append(FeedRange(author: author, from: theirSeq, prev: nil, to: theirSeq))
                }
            } else {
                if theirSeq == own.seq { plan.pushes.append(FeedRange(author: author, from: own.seq, prev: nil, to: own.seq)) }
                plan.wants.append(FeedAnnouncement(author: author, seq: theirSeq, head: .zero))
            }
        }
        guard check == peerChecksum else { return nil }
        plan.pushes.sort { $0.author < $1.author }
        plan.wants.sort { $0.author < $1.author }
        return plan
    }

    // MARK: Sketcher

    /// The decoder's answer (or, on either side, the peer giving up).
    package mutating func receive(_ result: SketchResult) throws -> SketcherStep {
        guard !finished || result.outcome == .giveUp, role != nil else { throw SyncError.unexpected("a sketch result out of turn") }
        if result.outcome == .giveUp {
            finished = true
            return .giveUp
        }
        guard role == .sketcher else { throw SyncError.unexpected("a sketch result to the decoder") }
        switch result.outcome {
        case .more:
            guard capacity < Self.maxCapacity else { throw SyncError.unexpected("more sketch sums than the largest capacity") }
            let done = 2 * capacity
            capacity = min(Self.maxCapacity, 2 * capacity)
            return .next(nextSums(from: done))
        case .found:
            finished = true
            guard let s = sketch else { throw SyncError.unexpected("a sketch result after giving up") }
            var announce: [FeedAnnouncement] = []
            for tag in result.asks {
                guard let item = s.item(tag: tag) else { throw SyncError.unexpected("a sketch result asking for a feed this side does not hold") }
                announce.append(FeedAnnouncement(author: item.author, seq: item.seq, head: item.head))
            }
            return .found(announce: announce, push: result.push)
        case .giveUp:
            return .giveUp
        }
    }
}

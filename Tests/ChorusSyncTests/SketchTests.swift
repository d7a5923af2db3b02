import CGF64
import ChorusCrypto
import ChorusLog
import ChorusSync
import ChorusTestSupport
import Foundation
import Testing

/// Sketch reconciliation (Specs/sync.md §4.2.2) apart from any transport:
/// the field, the decoder against set arithmetic, both roles against the
/// vectors of an independent implementation.
@Suite("Sketch reconciliation", .closingNodes)
struct SketchTests {
    /// Feeds as chains of event ids, for the decoder's look-ups.
    struct Chains: FeedLookup {
        var feeds: [PublicKey: [EventID]]
        func head(of author: PublicKey) throws -> FeedHead? {
            feeds[author].flatMap { ids in ids.last.map { FeedHead(seq: UInt64(ids.count), id: $0, hlc: .zero) } }
        }
        func eventID(of author: PublicKey, at seq: UInt64) throws -> EventID? {
            guard let ids = feeds[author], seq >= 1, seq <= UInt64(ids.count) else { return nil }
            return ids[Int(seq) - 1]
        }
        var heads: [FeedAnnouncement] {
            feeds.compactMap { a, ids in ids.last.map { FeedAnnouncement(author: a, seq: UInt64(ids.count), head: $0) } }
        }
    }

    static func word(_ hex: String) -> UInt64 { (Hex.decode(hex) ?? []).prefix(8).reduce(0) { $0 << 8 | UInt64($1) } }

    @Test("products in GF(2^64) match the vectors, the portable multiply agrees with the CPU's, inverses invert")
    func field() throws {
        let json = try Self.vectors()
        for row in try #require(json["field"] as? [[String]]) {
            #expect(GF64.mul(Self.word(row[0]), Self.word(row[1])) == Self.word(row[2]))
        }
        // The portable loop (CPUs without a carry-less multiply) agrees with
        // whichever path this CPU runs.
        var rng = SplitMix64(seed: 5)
        for _ in 0..<2000 {
            let a = rng.next(), b = rng.next()
            #expect(chorus_gf64_mul_portable(a, b) == GF64.mul(a, b))
        }
        var x: UInt64 = 0x9E37_79B9_7F4A_7C15
        for _ in 0..<50 {
            #expect(GF64.mul(x, GF64.inverse(x)) == 1)
            #expect(GF64.mul(x, 1) == x && GF64.mul(x, 0) == 0)
            x = GF64.mul(x, x) ^ 0x1234_5678
        }
    }

    @Test("the decoder finds exactly the set difference of 120 random pairs of sets, or nothing beyond its capacity")
    func decodesRandomDifferences() {
        var rng = SplitMix64(seed: 11)
        for trial in 0..<120 {
            let capacity = [1, 2, 3, 8, 17, 40][trial % 6]
            let common = Int.random(in: 0..<60, using: &rng)
            let differing = Int.random(in: 0...(capacity + 2), using: &rng)
            var a: [UInt64: UInt64] = [:], b: [UInt64: UInt64] = [:]
            for _ in 0..<common {
                let tag = UInt64.random(in: 1...UInt64.max, using: &rng), v = UInt64.random(in: 1...UInt64.max, using: &rng)
                a[tag] = v
                b[tag] = v
            }
            var truth: [UInt64: UInt64] = [:]
            for _ in 0..<differing {
                let tag = UInt64.random(in: 1...UInt64.max, using: &rng)
                let va = Bool.random(using: &rng) ? UInt64.random(in: 1...UInt64.max, using: &rng) : 0
                var vb = UInt64.random(in: 0...UInt64.max, using: &rng)
                if vb == va { vb ^= 1 }
                a[tag] = va == 0 ? nil : va
                b[tag] = vb == 0 ? nil : vb
                truth[tag] = va ^ vb
            }
            let sums = zip(Self.sums(a, 2 * capacity), Self.sums(b, 2 * capacity)).map { $0 ^ $1 }
            let decoded = FeedSketch.decode(sums, candidates: Array(a.keys))
            if truth.count <= capacity {
                let found = decoded.map { Dictionary(uniqueKeysWithValues: $0.map { ($0.tag, $0.error) }) }
                #expect(found == truth, "trial \(trial): \(truth.count) differences, capacity \(capacity)")
            } else {
                #expect(decoded == nil || decoded?.count ?? 0 <= capacity, "trial \(trial)")
            }
        }
    }

    static func sums(_ set: [UInt64: UInt64], _ n: Int) -> [UInt64] {
        let items = Array(set)
        var powers = items.map(\.key)
        var out: [UInt64] = []
        for _ in 0..<n {
            var s: UInt64 = 0
            for (i, item) in items.enumerated() {
                s ^= GF64.mul(item.value, powers[i])
                powers[i] = GF64.mul(powers[i], item.key)
            }
            out.append(s)
        }
        return out
    }

    static func vectors() throws -> [String: Any] {
        let data = try Data(contentsOf: specVector("sketch.json"))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    static func chains(_ rows: Any?) -> Chains {
        var feeds: [PublicKey: [EventID]] = [:]
        for row in rows as? [[Any]] ?? [] {
            guard row.count == 2, let a = (row[0] as? String).flatMap({ Bytes32(hex: $0) }), let ids = row[1] as? [String] else { continue }
            feeds[a] = ids.compactMap { Bytes32(hex: $0) }
        }
        return Chains(feeds: feeds)
    }

    @Test("both roles reproduce every message and decision of the vectors (Specs/vectors/sketch.json)")
    func vectorScenarios() throws {
        let scenarios = try #require(try Self.vectors()["scenarios"] as? [[String: Any]])
        #expect(scenarios.count == 3)
        for s in scenarios {
            let name = s["name"] as? String ?? "?"
            let a = Self.chains(s["a"]), b = Self.chains(s["b"])
            let key = { (k: String) in Bytes32(hex: s[k] as? String ?? "") ?? .zero }
            var ra = SketchReconciler(heads: a.heads, nonce: Hex.decode(s["aNonce"] as? String ?? "") ?? [], device: key("aDevice"), peerDevice: key("bDevice"))
            var rb = SketchReconciler(heads: b.heads, nonce: Hex.decode(s["bNonce"] as? String ?? "") ?? [], device: key("bDevice"), peerDevice: key("aDevice"))
            let infoA = SyncMessage.sketchInfo(ra.info()).encoded(), infoB = SyncMessage.sketchInfo(rb.info()).encoded()
            #expect(Hex.encode(infoA) == s["aInfo"] as? String, "\(name): A's sketchInfo")
            #expect(Hex.encode(infoB) == s["bInfo"] as? String, "\(name): B's sketchInfo")
            let startA = ra.start(peer: rb.info()), startB = rb.start(peer: ra.info())
            if s["outcome"] as? String == "identical" {
                guard case .identical = startA, case .identical = startB else {
                    Issue.record("\(name): both sides should see identical sets")
                    continue
                }
                continue
            }
            let aSketches = s["sketcher"] as? String == "a"
            var sketcher = aSketches ? ra : rb, decoder = aSketches ? rb : ra
            let decoderChains = aSketches ? b : a
            guard case .sketch(let first?) = aSketches ? startA : startB, case .decode = aSketches ? startB : startA else {
                Issue.record("\(name): roles differ from the vector")
                continue
            }
            var sums = first
            var plan: SketchReconciler.Plan? = nil
            for (index, round) in (s["rounds"] as? [[String: Any]] ?? []).enumerated() {
                let wire = SyncMessage.sketch(sums).encoded()
                #expect(Hex.encode(wire) == round["sketch"] as? String, "\(name): sketch round \(index + 1)")
                guard case .sketch(let received) = try SyncMessage.decode(wire) else { throw SyncError.malformed("not sketch sums") }
                let reply: SketchResult
                switch try decoder.receive(received, store: decoderChains) {
                case .reply(let r): reply = r
                case .found(let r, let p):
                    reply = r
                    plan = p
                }
                let replyWire = SyncMessage.sketchResult(reply).encoded()
                #expect(Hex.encode(replyWire) == round["reply"] as? String, "\(name): reply \(index + 1)")
                guard case .sketchResult(let decodedReply) = try SyncMessage.decode(replyWire) else { throw SyncError.malformed("not a result") }
                switch try sketcher.receive(decodedReply) {
                case .next(let more): sums = more
                case .found(let announce, let push):
                    let asks = (s["asks"] as? [String] ?? []).compactMap { Bytes32(hex: $0) }
                    #expect(announce.map(\.author) == asks, "\(name): the sketcher announces what the decoder asked")
                    let count = (s["pushes"] as? [[Any]] ?? []).reduce(0) { $0 + (($1[2] as? Int ?? 0) - ($1[1] as? Int ?? 0) + 1) }
                    #expect(push == UInt64(count), "\(name): the push count")
                case .giveUp: break
                }
            }
            let p = try #require(plan, "\(name): the decoder found the difference")
            let pushes = (s["pushes"] as? [[Any]] ?? []).map { "\($0[0]) \($0[1]) \($0[2])" }
            #expect(p.pushes.map { "\($0.author.hex) \($0.from) \($0.to)" } == pushes, "\(name): pushes")
            let wants = (s["wants"] as? [[Any]] ?? []).map { "\($0[0]) \($0[1])" }
            #expect(p.wants.map { "\($0.author.hex) \($0.seq)" } == wants, "\(name): wants")
        }
    }

    @Test("malformed sketch messages are refused")
    func malformed() {
        let bad: [[UInt8]] = [
            SyncMessage.sketchInfo(SketchInfo(count: 1, total: 1, setHash: [1, 2], nonce: [UInt8](repeating: 0, count: 16))).encoded(),
            SyncMessage.sketch(SketchSums(checksum: 1, sums: [])).encoded(),
            SyncMessage.sketchResult(SketchResult(outcome: .more, asks: [5], push: 0)).encoded(),
            SyncMessage.sketchResult(SketchResult(outcome: .giveUp, asks: [], push: 3)).encoded(),
        ]
        for frame in bad { #expect(throws: SyncError.self) { try SyncMessage.decode(frame) } }
    }
}

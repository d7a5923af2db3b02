import ChorusCrypto
import ChorusSync
import ChorusTestSupport
import Foundation
import Testing

/// Feed-head reconciliation (Specs/sync.md §4.2.1) apart from any transport:
/// both sides' decisions driven message by message.
@Suite("Reconciliation of feed heads", .closingNodes)
struct ReconcileTests {
    /// Runs both sides to the end. Returns what each announced, the
    /// messages each sent, and the bytes each sent.
    static func run(_ a: [FeedAnnouncement], _ b: [FeedAnnouncement]) throws -> (
        aAnnounced: [FeedAnnouncement], bAnnounced: [FeedAnnouncement], rounds: [(a: [UInt8], b: [UInt8], aAnn: [PublicKey], bAnn: [PublicKey])]
    ) {
        var ra = Reconciler(heads: a), rb = Reconciler(heads: b)
        var ma: ReconcileRound? = ra.firstRound(), mb: ReconcileRound? = rb.firstRound()
        var aAll: [FeedAnnouncement] = [], bAll: [FeedAnnouncement] = []
        var rounds: [(a: [UInt8], b: [UInt8], aAnn: [PublicKey], bAnn: [PublicKey])] = []
        while let sa = ma, let sb = mb {
            // Through the wire encoding, as a peer would receive them.
            let wa = SyncMessage.reconcile(sa).encoded(), wb = SyncMessage.reconcile(sb).encoded()
            guard case .reconcile(let da) = try SyncMessage.decode(wa), case .reconcile(let db) = try SyncMessage.decode(wb) else {
                throw SyncError.malformed("not a reconcile round")
            }
            let (annA, nextA) = try ra.receive(db)
            let (annB, nextB) = try rb.receive(da)
            aAll += annA
            bAll += annB
            rounds.append((wa, wb, annA.map(\.author), annB.map(\.author)))
            #expect((nextA == nil) == (nextB == nil), "both sides end in the same round")
            ma = nextA
            mb = nextB
        }
        return (aAll, bAll, rounds)
    }

    static func heads(_ rows: Any?) -> [FeedAnnouncement] {
        (rows as? [[Any]] ?? []).compactMap { r in
            guard r.count == 3, let a = (r[0] as? String).flatMap({ Bytes32(hex: $0) }), let seq = r[1] as? Int,
                let h = (r[2] as? String).flatMap({ Bytes32(hex: $0) })
            else { return nil }
            return FeedAnnouncement(author: a, seq: UInt64(seq), head: h)
        }
    }

    @Test("both sides reproduce the vectors byte for byte (Specs/vectors/reconcile.json)")
    func vectors() throws {
        let data = try Data(contentsOf: specVector("reconcile.json"))
        let json = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let d = try #require(json["digest"] as? [String: Any])
        let one = FeedAnnouncement(
            author: try #require(Bytes32(hex: d["author"] as? String ?? "")), seq: UInt64(d["seq"] as? Int ?? 0),
            head: try #require(Bytes32(hex: d["head"] as? String ?? "")))
        #expect(Hex.encode(Reconciler.bytes([Reconciler.digest(one)])) == d["digest"] as? String)
        let scenarios = try #require(json["scenarios"] as? [[String: Any]])
        #expect(scenarios.count == 3)
        for s in scenarios {
            let name = s["name"] as? String ?? "?"
            let expected = s["rounds"] as? [[String: Any]] ?? []
            let got = try Self.run(Self.heads(s["a"]), Self.heads(s["b"])).rounds
            #expect(got.count == expected.count, "\(name): rounds")
            for (i, (g, e)) in zip(got, expected).enumerated() {
                #expect(Hex.encode(g.a) == e["a"] as? String, "\(name) round \(i + 1): A's message")
                #expect(Hex.encode(g.b) == e["b"] as? String, "\(name) round \(i + 1): B's message")
                #expect(g.aAnn.map(\.hex) == e["aAnnounces"] as? [String], "\(name) round \(i + 1): A's announcements")
                #expect(g.bAnn.map(\.hex) == e["bAnnounces"] as? [String], "\(name) round \(i + 1): B's announcements")
            }
        }
    }

    static func randomFeeds(_ n: Int, _ rng: inout SplitMix64) -> [FeedAnnouncement] {
        (0..<n).map { _ in
            FeedAnnouncement(author: Bytes32(rng.bytes(32))!, seq: UInt64(Int.random(in: 1...1000, using: &rng)), head: Bytes32(rng.bytes(32))!)
        }
    }

    @Test("identical sets of 10,000 feeds agree in one round of under 200 bytes each way")
    func identical() throws {
        var rng = SplitMix64(seed: 7)
        let feeds = Self.randomFeeds(10_000, &rng)
        let r = try Self.run(feeds, feeds.shuffled(using: &rng))
        #expect(r.rounds.count == 1)
        #expect(r.aAnnounced.isEmpty && r.bAnnounced.isEmpty)
        #expect(r.rounds[0].a.count < 200 && r.rounds[0].b.count < 200)
    }

    @Test("each side announces exactly the heads the other lacks or holds otherwise, on seeded random sets")
    func findsExactlyTheDifferences() async throws {
        for seed in 0..<40 as Range<UInt64> {
            await Task.yield()  // seconds in all: let other tests' tasks run between seeds
            var rng = SplitMix64(seed: seed)
            let shared = Self.randomFeeds(Int.random(in: 0...3000, using: &rng), &rng)
            let onlyA = Self.randomFeeds(Int.random(in: 0...40, using: &rng), &rng)
            let onlyB = Self.randomFeeds(Int.random(in: 0...40, using: &rng), &rng)
            var a = shared + onlyA, b = shared + onlyB
            // Feeds both hold at other heights or heads.
            for _ in 0..<Int.random(in: 0...30, using: &rng) where !shared.isEmpty {
                let i = Int.random(in: 0...(shared.count - 1), using: &rng)
                b[i] = FeedAnnouncement(author: shared[i].author, seq: shared[i].seq + UInt64(Int.random(in: 0...3, using: &rng)), head: Bytes32(rng.bytes(32))!)
            }
            a.shuffle(using: &rng)
            let r = try Self.run(a, b)
            let aSet = Set(a), bSet = Set(b)
            #expect(Set(r.aAnnounced) == aSet.subtracting(bSet), "seed \(seed): A announces A \\ B")
            #expect(Set(r.bAnnounced) == bSet.subtracting(aSet), "seed \(seed): B announces B \\ A")
            #expect(r.aAnnounced.count == Set(r.aAnnounced).count, "seed \(seed): nothing announced twice")
        }
    }

    @Test("sets too different for fingerprints end in a full announcement of the differing buckets")
    func tooDifferent() throws {
        var rng = SplitMix64(seed: 99)
        let a = Self.randomFeeds(20_000, &rng), b = Self.randomFeeds(20_000, &rng)
        let r = try Self.run(a, b)
        #expect(Set(r.aAnnounced) == Set(a))
        #expect(Set(r.bAnnounced) == Set(b))
        #expect(r.rounds.count <= 3)
    }

    @Test("a round out of step with this side's is refused")
    func outOfStep() throws {
        var rng = SplitMix64(seed: 3)
        let feeds = Self.randomFeeds(500, &rng)
        var a = Reconciler(heads: feeds)
        var b = Reconciler(heads: Array(feeds.dropFirst(50)))
        _ = a.firstRound()
        let first = b.firstRound()
        var wrong = first
        wrong.splits = [ReconcileSplit(prefix: [3], fingerprints: first.splits[0].fingerprints)]
        #expect(throws: SyncError.self) { try a.receive(wrong) }
        var fresh = Reconciler(heads: feeds)
        #expect(throws: SyncError.self) { try fresh.receive(first) }
    }

    @Test("malformed reconcile messages are refused")
    func malformed() {
        let fingerprints = [UInt8](repeating: 1, count: 128)
        let good = SyncMessage.reconcile(ReconcileRound(count: 1, splits: [ReconcileSplit(prefix: [], fingerprints: fingerprints)], leaves: []))
        #expect((try? SyncMessage.decode(good.encoded())) == good)
        let badNibble = SyncMessage.reconcile(
            ReconcileRound(count: 1, splits: [ReconcileSplit(prefix: [16], fingerprints: fingerprints)], leaves: []))
        let shortFingerprints = SyncMessage.reconcile(
            ReconcileRound(count: 1, splits: [ReconcileSplit(prefix: [], fingerprints: Array(fingerprints.dropLast()))], leaves: []))
        let oddDigests = SyncMessage.reconcile(ReconcileRound(count: 1, splits: [], leaves: [ReconcileLeaf(prefix: [1], digests: [1, 2, 3])]))
        let rootLeaf = SyncMessage.reconcile(ReconcileRound(count: 1, splits: [], leaves: [ReconcileLeaf(prefix: [], digests: [])]))
        for bad in [badNibble, shortFingerprints, oddDigests, rootLeaf] {
            #expect(throws: SyncError.self) { try SyncMessage.decode(bad.encoded()) }
        }
    }
}

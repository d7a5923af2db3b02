import ChorusCrypto
import ChorusEvents
import ChorusProjections
import ChorusTestSupport
import Foundation
import Testing

/// Convergence: random worlds delivered to several replicas in random
/// orders, with duplicates, gossip between replicas (which carries purged
/// copies) and partitions that heal. Every replica must end with the same
/// digest, equal to a rebuild from its log and to a fresh fold of the event
/// set; the coin invariants are checked after every delivery.
///
/// `CHORUS_PROPERTY_SEED=<n>` replays one schedule (the seed printed in a
/// failure); `CHORUS_PROPERTY_SCHEDULES=<n>` sets how many schedules run.
@Suite("Projections: property tests")
struct PropertyTests {
    static let shards = 8
    static let defaultSchedules = 600
    static let baseSeed: UInt64 = 0xC0FF_EE15_5EED_0003

    static var replaySeed: UInt64? {
        guard let text = ProcessInfo.processInfo.environment["CHORUS_PROPERTY_SEED"] else { return nil }
        return text.hasPrefix("0x") ? UInt64(text.dropFirst(2), radix: 16) : UInt64(text)
    }

    static var scheduleCount: Int {
        ProcessInfo.processInfo.environment["CHORUS_PROPERTY_SCHEDULES"].flatMap { Int($0) } ?? defaultSchedules
    }

    @Test(arguments: 0..<PropertyTests.shards)
    func replicasConverge(shard: Int) async throws {
        let seeds: [UInt64]
        if let replay = Self.replaySeed {
            seeds = shard == 0 ? [replay] : []
        } else {
            seeds = stride(from: shard, to: Self.scheduleCount, by: Self.shards).map { mixSeed(Self.baseSeed, UInt64($0)) }
        }
        // Seconds of computation per shard: off the cooperative threads.
        let failure: String? = try await offThePool {
            for seed in seeds {
                do {
                    let problems = try ScheduleRun(seed: seed).run()
                    if !problems.isEmpty {
                        let details = problems.prefix(30).joined(separator: "\n")
                        return "schedule seed \(seed) (replay with CHORUS_PROPERTY_SEED=\(seed)):\n\(details)"
                    }
                } catch {
                    return "schedule seed \(seed) (replay with CHORUS_PROPERTY_SEED=\(seed)) threw: \(error)"
                }
            }
            return nil
        }
        if let failure { Issue.record(Comment(rawValue: failure)) }
    }
}

/// One schedule: a world, three replicas, their delivery orders.
struct ScheduleRun {
    let seed: UInt64
    static let replicaCount = 3

    func run() throws -> [String] {
        let world = try World(seed: seed)
        var rng = SplitMix64(seed: seed ^ 0x5EED_0F_0DE7)
        let events = world.events
        let users = world.userKeys
        let replicas = try (0..<Self.replicaCount).map { _ in try Replica(config: world.config, blobSource: world.blobs, label: "prop", supplyLimit: world.supplyLimit) }

        // Each replica's own order of the origin's events, with duplicates.
        var plans: [[Event]] = replicas.map { _ in
            var plan = events.shuffled(using: &rng)
            for e in events where rng.chance(0.12) { plan.insert(e, at: rng.int(0...plan.count)) }
            return plan
        }
        // A partition into two sides until the network heals.
        let side = replicas.map { _ in rng.int(0...1) }
        let total = plans.reduce(0) { $0 + $1.count }
        let healAt = rng.int(0...total)
        var consumed = 0
        var problems: [String] = []

        while plans.contains(where: { !$0.isEmpty }) {
            let r = rng.pick(plans.indices.filter { !plans[$0].isEmpty })!
            let healed = consumed >= healAt
            let peers = replicas.indices.filter { $0 != r && (healed || side[$0] == side[r]) }
            let batch: [Event]
            if let peer = rng.pick(peers), rng.chance(0.15) {
                // Gossip: a feed range from a peer's log, exactly as stored
                // there (payloads the peer purged travel purged).
                guard let author = rng.pick(try replicas[peer].log.allHeads().map(\.author)) else { continue }
                let feed = try replicas[peer].log.feed(author).map(\.event)
                let from = rng.int(0...feed.count - 1)
                batch = Array(feed[from..<min(feed.count, from + rng.int(1...4))])
            } else {
                let n = rng.chance(0.75) ? 1 : rng.int(2...3)
                batch = Array(plans[r].prefix(n))
                plans[r].removeFirst(min(n, plans[r].count))
                consumed += batch.count
            }
            // A delivery that stored nothing (all duplicates, or buffered
            // behind a gap) leaves the state as the last check saw it.
            if try replicas[r].deliver(batch).isEmpty { continue }
            let violations = try coinInvariantViolations(replicas[r].projections, users: users)
            if !violations.isEmpty {
                return ["after delivery \(replicas[r].deliveries) to replica \(r): "] + violations
            }
        }

        // Payload refill, as sync must do it: a replica purges a payload when
        // a deletion takes effect, but that deletion may stop taking effect
        // when an event arrives later (the deleting device turns out to have
        // been removed before it deleted). The replica then holds a live
        // object whose payload it purged (`PictureRecord.purged`), and only
        // the payload, fetched again from a peer, can bring it back. A refill
        // of a payload that is still deleted is purged again at once.
        // Before it, the replicas' payload gap entries name exactly those
        // objects (Specs/projections.md §9.1), incrementally and, for a
        // replica that holds some, after a rebuild (its bulk fold); so do
        // the blob wanted entries name the blobs referenced and lacking.
        for (i, replica) in replicas.enumerated() {
            let (gapProblems, gaps) = try replica.payloadGapProblems()
            let (wantedProblems, wanted) = try replica.blobWantedProblems()
            problems += (gapProblems + wantedProblems).map { "replica \(i) before the refill: " + $0 }
            guard i == 1, gaps + wanted > 0 else { continue }
            let digest = try replica.digest()
            try replica.store.rebuild(sliceSize: rng.int(1...64), part: rng.int(0...1) == 0 ? rng.int(1...16) : nil)
            if try replica.digest() != digest { problems.append("a rebuild of replica 1 before the refill changed its state") }
            problems += try (replica.payloadGapProblems().problems + replica.blobWantedProblems().problems)
                .map { "replica 1 rebuilt before the refill: " + $0 }
        }
        let originals = Dictionary(events.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        func refill(_ replica: Replica) throws {
            let purged = try replica.storedEvents().filter { $0.payloadBytes == nil }.compactMap { originals[$0.id] }
            if !purged.isEmpty { try replica.deliver(purged) }
        }
        for (i, replica) in replicas.enumerated() {
            try refill(replica)
            let violations = try coinInvariantViolations(replica.projections, users: users)
            if !violations.isEmpty { return ["after the refill of replica \(i): "] + violations }
        }

        for (i, replica) in replicas.enumerated() where replica.pendingCount != 0 {
            problems.append("replica \(i) still buffers \(replica.pendingCount) events")
        }
        for (i, replica) in replicas.enumerated() {
            let held = try replica.log.eventCount()
            if held != events.count { problems.append("replica \(i) holds \(held) of \(events.count) events") }
        }
        let digests = try replicas.map { try $0.digest() }
        for i in 1..<replicas.count where digests[i] != digests[0] {
            problems.append("replica \(i) digest \(digests[i].short) differs from replica 0 \(digests[0].short)")
            problems += try diff(replicas[0], replicas[i])
        }

        // A fresh fold of the whole event set in one transaction.
        let fresh = try Replica(config: world.config, blobSource: world.blobs, label: "fresh", supplyLimit: world.supplyLimit)
        try fresh.deliver(events)
        if try fresh.digest() != digests[0] {
            problems.append("a fresh fold of the event set differs from replica 0")
            problems += try diff(replicas[0], fresh)
        }
        problems += try coinInvariantViolations(fresh.projections, users: users).map { "fresh fold: " + $0 }

        // The batched fold (the whole set in one transaction, above) equals
        // the fold of one event per transaction, feeds interleaved at random
        // in feed order so that none waits for a gap (Specs/projections.md
        // §9.1), after the same refill: a deletion delivered before the
        // removal of its device purges what stays live.
        let single = try Replica(config: world.config, blobSource: world.blobs, label: "single", supplyLimit: world.supplyLimit)
        var feeds = Dictionary(grouping: events, by: \.author).mapValues { $0.sorted { $0.seq < $1.seq }[...] }
        while let author = rng.pick(Array(feeds.keys).sorted()), let next = feeds[author]?.popFirst() {
            if feeds[author]?.isEmpty == true { feeds[author] = nil }
            try single.deliver([next])
        }
        try refill(single)
        if try single.log.eventCount() != events.count {
            problems.append("one event per transaction: \(try single.log.eventCount()) of \(events.count) events stored")
        } else if try single.digest() != digests[0] {
            problems.append("the fold of one event per transaction differs from replica 0")
            problems += try diff(replicas[0], single)
        }

        // A rebuild from replica 0's own log; half the time with a filing
        // budget so small that the filed runs are written in several merges,
        // half the time with a sends budget so small that the sends are
        // filed in `index` (from the first slice, or from a later one), half
        // the time with a payloads budget so small that the fold reads some
        // or all payloads from the log again, and half the time with slices
        // filed and messages folded in parts of a few, one core each.
        let before = try replicas[0].stateLines()
        try replicas[0].store.rebuild(
            sliceSize: rng.int(1...64), filingBudget: rng.int(0...1) == 0 ? rng.int(1...40_000) : Projections.filingBudget,
            sendsBudget: rng.int(0...1) == 0 ? rng.int(0...4_000) : Projections.sendsBudget,
            payloadsBudget: rng.int(0...1) == 0 ? rng.int(0...4_000) : Projections.payloadsBudget,
            part: rng.int(0...1) == 0 ? rng.int(1...16) : nil)
        if try replicas[0].digest() != digests[0] {
            problems.append("rebuild of replica 0 from its log differs from its incremental state")
            let after = try replicas[0].stateLines()
            problems += lineDiff(before, after)
        }
        for (label, replica) in [("replica 0 rebuilt", replicas[0]), ("replica 1", replicas[1]), ("replica 2", replicas[2]), ("fresh", fresh), ("single", single)] {
            problems += try (replica.payloadGapProblems().problems + replica.blobWantedProblems().problems + replica.chatActivityProblems()
                + replica.chatRowProblems())
                .map { "\(label): " + $0 }
        }
        problems += try coinInvariantViolations(replicas[0].projections, users: users).map { "replica 0 rebuilt: " + $0 }
        if try replicas[0].filedSendsLeft() != 0 {
            problems.append("the rebuild left \(try replicas[0].filedSendsLeft()) sends filed in its index")
        }

        // Purging: no replica holds the payload of an effectively deleted
        // picture or message, nor a deleted picture's blob.
        for (i, replica) in replicas.enumerated() {
            problems += try purgeProblems(replica).map { "replica \(i): " + $0 }
        }
        problems += try feedProblems(fresh, users: users, rng: &rng)
        return problems
    }

    /// Every user's feed, in pages and from a random point, equals the live
    /// pictures of the users they follow and do not block, newest first by
    /// (HLC, id) (Specs/projections.md §7.3), computed here the long way.
    func feedProblems(_ r: Replica, users: [PublicKey], rng: inout SplitMix64) throws -> [String] {
        var out: [String] = []
        for user in users.map(UserID.init) {
            let blocked = Set(try r.projections.blocked(by: user))
            var all: [PictureView] = []
            for followed in try r.projections.following(of: user) where !blocked.contains(followed) {
                all += try r.projections.pictures(of: followed)
            }
            all.sort { ($0.hlc, $0.id.raw) > ($1.hlc, $1.id.raw) }
            var befores: [HLC?] = [nil]
            if let some = rng.pick(all) { befores.append(some.hlc) }
            for before in befores {
                let expected = all.filter { picture in before.map { picture.hlc < $0 } ?? true }
                for limit in [1, 3, 50] {
                    let got = try r.projections.feed(for: user, limit: limit, before: before).map(\.id)
                    if got != expected.prefix(limit).map(\.id) {
                        out.append("feed of \(user.short), limit \(limit), before \(before.map { "\($0.rawValue)" } ?? "none"): \(got.map(\.short)) instead of \(expected.prefix(limit).map(\.id.short))")
                    }
                }
            }
        }
        return out
    }

    func diff(_ a: Replica, _ b: Replica) throws -> [String] {
        var out = lineDiff(try a.stateLines(), try b.stateLines())
        // The events whose decisions differ, and whose payloads one side purged.
        let na = Dictionary(try a.projections.noEffects().map { ($0.event, $0.reason.code) }, uniquingKeysWith: { x, _ in x })
        let nb = Dictionary(try b.projections.noEffects().map { ($0.event, $0.reason.code) }, uniquingKeysWith: { x, _ in x })
        for e in try a.storedEvents() where na[e.id] != nb[e.id] {
            out.append("  decision of \(e.kind.name) \(e.id.short) by \(e.author.short) at \(e.hlc.rawValue): \(na[e.id] ?? "effective") vs \(nb[e.id] ?? "effective")")
        }
        let pb = Dictionary(try b.storedEvents().map { ($0.id, $0.payloadBytes != nil) }, uniquingKeysWith: { x, _ in x })
        for e in try a.storedEvents() where (e.payloadBytes != nil) != pb[e.id] {
            out.append("  payload of \(e.kind.name) \(e.id.short) on \(e.object.short): \(e.payloadBytes != nil) vs \(pb[e.id] ?? false)")
            for f in try a.storedEvents() where f.object == e.object || f.kind == .deviceRemoved || f.kind == .deviceAdded {
                out.append("    \(f.kind.name) \(f.id.short) by \(f.author.short) on \(f.object.short) at \(f.hlc.rawValue): \(na[f.id] ?? "effective")")
            }
        }
        return out
    }

    func lineDiff(_ a: [String], _ b: [String]) -> [String] {
        let sa = Set(a)
        let sb = Set(b)
        return a.filter { !sb.contains($0) }.prefix(5).map { "  only in first: \($0.prefix(220))" }
            + b.filter { !sa.contains($0) }.prefix(5).map { "  only in second: \($0.prefix(220))" }
    }

    func purgeProblems(_ r: Replica) throws -> [String] {
        var out: [String] = []
        // Every event about a deleted picture or message is stored without
        // its payload, and a deleted picture's blob is gone.
        for stored in try r.log.arrivals(since: 0) {
            let e = stored.event
            switch e.kind {
            case .pictureCreated, .pictureCaptioned:
                guard case .deleted = try r.projections.picture(PictureID(e.object)) else { continue }
                if e.payloadBytes != nil { out.append("\(e.kind.name) \(e.id.short) of deleted picture \(e.object.short) keeps its payload") }
            case .messageSent:
                guard let m = try r.projections.message(e.id), m.deleted != nil else { continue }
                if e.payloadBytes != nil { out.append("deleted message \(e.id.short) keeps its payload") }
            case .messageEdited:
                guard let m = try r.projections.message(e.object), m.deleted != nil else { continue }
                if e.payloadBytes != nil { out.append("edit \(e.id.short) of deleted message keeps its payload") }
            default: continue
            }
        }
        for e in try r.storedEvents() where e.kind == .pictureCreated {
            guard case .deleted = try r.projections.picture(PictureID(e.object)) else { continue }
            if let blob = World.blobHash(of: e, in: r), try r.blobs.read(blob) != nil {
                out.append("blob of deleted picture \(e.object.short) is still stored")
            }
        }
        return out
    }
}

import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusProjections
import ChorusSync
import ChorusTestSupport
import Foundation
import Testing

@Suite("Sync sessions over the in-memory transport", .closingNodes)
struct SyncSessionTests {
    @Test("two nodes converge: feeds, projection digests and blobs")
    func twoNodesConverge() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let a = try await makeNode(dir, "a", network: net)
        let b = try await makeNode(dir, "b", network: net)
        _ = try await a.setProfile(.name, .text("Alice"))
        let pic = try await a.addPicture(pictureBytes(1, size: 150_000), mime: "image/jpeg", caption: "big").object
        let gone = try await a.addPicture(pictureBytes(2), mime: "image/jpeg").object
        _ = try await a.deletePicture(gone)
        _ = try await b.setProfile(.name, .text("Bob"))
        let bpic = try await b.addPicture(pictureBytes(3), mime: "image/png").object
        try await a.follow(b.identity.user)
        try await b.like(pic)

        let (ra, rb) = try await syncPair(a, b)
        #expect(ra.complete && rb.complete)
        #expect(try feedHeads(a) == feedHeads(b))
        #expect(try digest(a) == digest(b))
        // Blobs of live pictures travel; the deleted picture's never does.
        #expect(try b.blobs.read(pictureBytesHash(1)) == pictureBytes(1, size: 150_000))
        #expect(try a.blobs.read(pictureBytesHash(3, size: 3000)) == pictureBytes(3))
        #expect(try b.blobs.read(pictureBytesHash(2, size: 3000)) == nil)
        #expect(ra.blobsSent == 1 && rb.blobsReceived == 1 && ra.blobsReceived == 1)
        #expect(ra.eventsSent == rb.eventsReceived && rb.eventsSent == ra.eventsReceived)
        if case .live(let v) = try b.projections.picture(bpic) { #expect(v.blob != nil) } else { Issue.record("picture missing") }
        print("two nodes: \(ra.eventsSent) + \(rb.eventsSent) events, \(ra.bytesSent + ra.bytesReceived) bytes, \(ra.framesSent + ra.framesReceived) frames")
        await a.close()
        await b.close()
    }

    /// Specs/sync.md §4.3: the server serves the feeds of keys that bind
    /// devices before the others, whatever order they were asked in. The
    /// device's key sorts before its user's, so its feed is asked for
    /// first, and its 1,500 events span three frames. With sketches the
    /// events are pushed (§4.2.2); without, they are asked for.
    @Test("a server serves the feeds that bind devices first, so a device's binding arrives before its events", arguments: [true, false])
    func bindersServedFirst(sketch: Bool) async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        var attempt = 0
        var a = try await makeNode(dir, "a0", network: net)
        while !(a.identity.device.raw < a.identity.user.raw) {
            await a.close()
            attempt += 1
            a = try await makeNode(dir, "a\(attempt)", network: net)
        }
        let b = try await makeNode(dir, "b", network: net)
        let items = (0..<1_500).map { PendingEvent(ProfileSetPayload(field: .bio, value: .text("bio \($0)")), object: a.identity.user.raw) }
        try await a.appendBatch(items)

        var options = SyncOptions.patient
        options.sketch = sketch
        let (ra, rb) = try await syncPair(a, b, optionsA: options, optionsB: options)
        #expect(ra.complete && rb.complete)
        #expect(ra.sketched == sketch)
        let binding = try #require(try b.feed(a.identity.user.raw).first { $0.event.kind == .deviceAdded })
        let deviceEvents = try b.feed(a.identity.device.raw)
        #expect(deviceEvents.count == 1_501)
        let first = try #require(deviceEvents.map(\.arrival).min())
        #expect(binding.arrival < first, "the binding arrived at \(binding.arrival), the device's first event at \(first)")
        #expect(try digest(a) == digest(b))
        await a.close()
        await b.close()
    }

    @Test("request skipping: a second sync of nodes in sync exchanges a handful of frames")
    func requestSkipping() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let a = try await makeNode(dir, "a", network: net)
        let b = try await makeNode(dir, "b", network: net)
        // Many feeds on A, so a full height exchange would be large.
        var writers: [SigningKey] = []
        var batch: [Event] = []
        let now = UInt64(Date().timeIntervalSince1970 * 1000) - 100_000
        for i in 0..<300 {
            let k = SigningKey.generate()
            writers.append(k)
            batch.append(
                try Event.sign(
                    with: k, seq: 1, prev: nil, hlc: HLC(physicalMillis: now + UInt64(i), logical: 0), kind: .profileSet,
                    object: k.publicKey, payload: .textMap([("field", .text("bio")), ("value", .text("feed \(i)"))])))
        }
        #expect(await a.ingest(events: batch).accepted == 300)
        let (first, _) = try await syncPair(a, b)
        #expect(first.complete)
        let (second, secondB) = try await syncPair(a, b)
        #expect(second.complete && secondB.complete)
        #expect(second.eventsSent == 0 && second.eventsReceived == 0)
        // hello, blobSerial, haveEnd, done each way.
        #expect(second.framesSent <= 4 && second.framesReceived <= 4)
        print("skipping: first sync \(first.bytesSent + first.bytesReceived) bytes, second \(second.bytesSent + second.bytesReceived) bytes")
        #expect(second.bytesSent + second.bytesReceived < 200)
        // A change after that is announced alone.
        _ = try await b.setProfile(.bio, .text("changed"))
        let (third, _) = try await syncPair(a, b)
        #expect(third.eventsReceived == 1)
        #expect(third.bytesSent + third.bytesReceived < 2000)
        #expect(try feedHeads(a) == feedHeads(b))
        let reader = try PeerStore(readingFrom: a.store)
        let records = try reader.all()
        #expect(records.count == 1 && records[0].key == b.identity.device.raw && records[0].sessions == 3)
        // Bookkeeping is written only through the node's writer.
        #expect(throws: BookkeepingReadOnly.self) { try reader.update(b.identity.device.raw, address: "") { $0.sessions = 0 } }
        await #expect(throws: BookkeepingReadOnly.self) { try await reader.forget(b.identity.device.raw) }
        #expect(try reader.record(b.identity.device.raw)?.sessions == 3)
        await a.close()
        await b.close()
    }

    @Test("four nodes, concurrent writes, random pairs and healing partitions converge")
    func manyNodesConverge() async throws {
        let seed = UInt64(ProcessInfo.processInfo.environment["CHORUS_SYNC_SEED"].flatMap { UInt64($0) } ?? UInt64.random(in: 1...1_000_000))
        print("manyNodesConverge seed \(seed) (set CHORUS_SYNC_SEED to replay)")
        var rng = SplitMix64(seed: seed)
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        var created: [Node] = []
        for i in 0..<4 { created.append(try await makeNode(dir, "n\(i)", network: net)) }
        let nodes = created
        var pictures: [PictureID] = []
        for round in 0..<6 {
            // Concurrent writes on every node.
            try await withThrowingTaskGroup(of: PictureID?.self) { group in
                for (i, node) in nodes.enumerated() {
                    let r = rng.next()
                    let target = nodes[Int(r % 4)].identity.user
                    group.addTask {
                        _ = try await node.setProfile(.bio, .text("round \(round) node \(i)"))
                        if r % 3 == 0, target != node.identity.user {
                            // Following someone already followed is refused, changing nothing.
                            do { try await node.follow(target) } catch NodeError.refused(let why) where why.code == "already_added" {}
                        }
                        if r % 5 == 1 { return try await node.addPicture(pictureBytes(Int(r % 1000) + 10), mime: "image/png").object }
                        return nil
                    }
                }
                for try await p in group { if let p { pictures.append(p) } }
            }
            // A partition: two halves sync only inside themselves.
            let cut = Int(rng.next() % 3) + 1
            let order = nodes.indices.shuffled(using: &rng)
            let left = Array(order[..<cut]), right = Array(order[cut...])
            for side in [left, right] where side.count > 1 {
                for _ in 0..<2 {
                    let x = side[Int(rng.next() % UInt64(side.count))]
                    var y = side[Int(rng.next() % UInt64(side.count))]
                    if x == y { y = side[(side.firstIndex(of: x)! + 1) % side.count] }
                    try await syncPair(nodes[x], nodes[y])
                }
            }
            // Writes during the partition, including a deletion on one side.
            if let p = pictures.first, round == 3 {
                for n in nodes where (try? n.projections.picture(p)).map({ if case .live(let v) = $0 { v.owner == n.identity.user } else { false } }) == true {
                    _ = try await n.deletePicture(p)
                }
            }
            // Concurrent random pairs (distinct nodes).
            let pairs = nodes.indices.shuffled(using: &rng)
            let (p0, p1, p2, p3) = (nodes[pairs[0]], nodes[pairs[1]], nodes[pairs[2]], nodes[pairs[3]])
            async let s1 = syncPair(p0, p1)
            async let s2 = syncPair(p2, p3)
            _ = try await (s1, s2)
        }
        // Heal: a ring twice round reaches everyone.
        for _ in 0..<2 { for i in 0..<4 { try await syncPair(nodes[i], nodes[(i + 1) % 4]) } }
        let heads = try feedHeads(nodes[0])
        let d = try digest(nodes[0])
        for n in nodes {
            #expect(try feedHeads(n) == heads, "seed \(seed)")
            #expect(try digest(n) == d, "seed \(seed)")
            #expect(try n.log.integrityProblems().isEmpty)
            #expect(try BlobCheck.missing(n) == 0, "seed \(seed)")
        }
        for n in nodes { await n.close() }
    }

    @Test("live mode delivers a new event to a connected peer")
    func liveMode() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let a = try await makeNode(dir, "a", network: net)
        let b = try await makeNode(dir, "b", network: net)
        let (ta, tb) = MemoryTransport.pair(a.identity.device.raw, b.identity.device.raw)
        // Live announcements may overtake a side's "done" under load: the
        // test closes only once both sides reported completion.
        let completed = LogLines()
        var options = SyncOptions.patient(live: true)
        options.onComplete = { _ in completed.append("complete") }
        let sa = try SyncSession(node: a, transport: ta, options: options)
        let sb = try SyncSession(node: b, transport: tb, options: options)
        let runA = Task { try await sa.run() }
        let runB = Task { try await sb.run() }
        #expect(try await eventually { try b.head(of: a.identity.user.raw) != nil })
        let event = try await a.setProfile(.bio, .text("live!"))
        #expect(try await eventually { try b.event(event.id) != nil })
        let reply = try await b.setProfile(.bio, .text("heard you"))
        #expect(try await eventually { try a.event(reply.id) != nil })
        #expect(try await eventually { try digest(a) == digest(b) })
        #expect(try await eventually { completed.all.count == 2 })
        await ta.close()
        let reportA = try await bounded(.seconds(120), "live session end") { try await runA.value }
        let reportB = try await bounded(.seconds(120), "live session end") { try await runB.value }
        #expect(reportA.live && reportB.live && reportA.complete)
        #expect(reportA.eventsReceived >= 1 && reportB.eventsReceived >= 1)
        await a.close()
        await b.close()
    }

    @Test("a live session wakes only for commits that grow a feed its scoped peer wants")
    func liveWakesByWhatChanged() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let hub = try await makeNode(dir, "hub", network: net)
        let reader = try await makeNode(dir, "reader", network: net)
        let followed = try await makeNode(dir, "followed", network: net)
        let stranger = try await makeNode(dir, "stranger", network: net)
        try await reader.follow(followed.identity.user)
        for n in [followed, stranger, reader] { try await syncPair(hub, n) }
        let strangerHeld = try reader.head(of: stranger.identity.device.raw)?.seq
        let (tr, th) = MemoryTransport.pair(reader.identity.device.raw, hub.identity.device.raw)
        var scoped = SyncOptions.patient(live: true)
        scoped.scope = ReplicationScope(hops: 1)
        let sr = try SyncSession(node: reader, transport: tr, options: scoped)
        let sh = try SyncSession(node: hub, transport: th, options: .patient(live: true))
        let runR = Task { try await sr.run() }
        let runH = Task { try await sh.run() }
        let first = try await followed.setProfile(.bio, .text("first"))
        _ = await hub.ingest([first.event.encoded()])
        #expect(try await eventually { try reader.event(first.id) != nil })
        // Thirty commits of a feed the reader does not want: none wakes the
        // hub's announcing for it (each woke it before).
        for i in 0..<30 {
            let e = try await stranger.setProfile(.bio, .text("n\(i)"))
            _ = await hub.ingest([e.event.encoded()])
        }
        let second = try await followed.setProfile(.bio, .text("second"))
        _ = await hub.ingest([second.event.encoded()])
        #expect(try await eventually { try reader.event(second.id) != nil })
        await tr.close()
        let hubReport = try await bounded(.seconds(120), "live session end") { try await runH.value }
        _ = try await bounded(.seconds(120), "live session end") { try await runR.value }
        #expect(hubReport.liveWakes <= 4, "\(hubReport.liveWakes) wake-ups for 2 commits the reader wants and 30 it does not")
        #expect(try reader.head(of: stranger.identity.device.raw)?.seq == strangerHeld)
        for n in [hub, reader, followed, stranger] { await n.close() }
    }

    @Test("--hops replicates exactly the feeds in scope")
    func partialReplication() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let hub = try await makeNode(dir, "hub", network: net)
        var users: [Node] = []
        for i in 0..<5 { users.append(try await makeNode(dir, "u\(i)", network: net)) }
        // u0 follows u1, u1 follows u2, u2 follows u3; u0 blocks u4 but u4 is in a chat with u0.
        try await users[0].follow(users[1].identity.user)
        try await users[1].follow(users[2].identity.user)
        try await users[2].follow(users[3].identity.user)
        try await users[0].block(users[4].identity.user)
        try await users[0].follow(users[4].identity.user)
        for u in users { _ = try await u.setProfile(.name, .text("user")) }
        for u in users { try await syncPair(hub, u) }
        func feedsOf(_ n: Node) -> Set<PublicKey> { [n.identity.user.raw, n.identity.device.raw] }

        for (hops, expected) in [(0, [0]), (1, [0, 1]), (2, [0, 1, 2]), (3, [0, 1, 2, 3])] {
            let viewerDir = SyncTempDir()
            defer { viewerDir.cleanup() }
            // A second device of u0 starts empty and replicates with the scope.
            let device = opened(try await Node.createDevice(at: viewerDir.store("d"), user: users[0].identity.user, network: net))
            var options = SyncOptions.patient
            options.scope = ReplicationScope(hops: hops)
            try await syncPair(device, hub, optionsA: options)
            let held = Set(try device.heads().map(\.author))
            var want: Set<PublicKey> = [device.identity.device.raw]  // its own device.key
            for i in expected { want.formUnion(feedsOf(users[i])) }
            // The user keys of followed users (not blocked ones) at any hops: their relay lists.
            want.insert(users[1].identity.user.raw)
            #expect(held == want, "hops \(hops)")
            await device.close()
        }
        // Chat members are in scope at hops 0; blocked users never.
        let chat = try await users[0].createChat(title: "c", members: [users[3].identity.user]).object
        _ = try await users[0].sendMessage(chat, text: "hi").object
        try await syncPair(users[0], hub)
        let d2 = SyncTempDir()
        defer { d2.cleanup() }
        let device = opened(try await Node.createDevice(at: d2.store("d"), user: users[0].identity.user, network: net))
        var options = SyncOptions.patient
        options.scope = ReplicationScope(hops: 0)
        try await syncPair(device, hub, optionsA: options)
        let held = Set(try device.heads().map(\.author))
        #expect(held.isSuperset(of: feedsOf(users[3])))
        #expect(held.isDisjoint(with: feedsOf(users[4])))
        #expect(held.isDisjoint(with: feedsOf(users[2])))
        await device.close()
        await hub.close()
        for u in users { await u.close() }
    }

    @Test("a connection cut mid-sync loses nothing acknowledged and resumes without duplicates")
    func cutAndResume() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let a = try await makeNode(dir, "a", network: net)
        let b = try await makeNode(dir, "b", network: net)
        var batch: [Event] = []
        let now = UInt64(Date().timeIntervalSince1970 * 1000) - 1_000_000
        // More events than the two cut sessions' frames can carry (32 frames
        // of at most SyncLimits.eventBatchCount), so both cuts land mid-stream
        // however the frames are timed.
        let perFeed = SyncLimits.eventBatchCount * 32 / 4 + 1000
        for f in 0..<4 {
            let k = SigningKey.generate()
            var prev: EventID? = nil
            for s in 1...perFeed {
                let e = try Event.sign(
                    with: k, seq: UInt64(s), prev: prev, hlc: HLC(physicalMillis: now + UInt64(s), logical: 0), kind: .profileSet,
                    object: k.publicKey, payload: .textMap([("field", .text("bio")), ("value", .text("feed \(f) event \(s)"))]))
                prev = e.id
                batch.append(e)
            }
        }
        #expect(await a.ingest(events: batch).accepted == 4 * perFeed)
        let total = try a.log.eventCount()
        for cut in [9, 23] {
            let (ra, rb) = try await syncPairResults(a, b, cutAfterFrames: cut, capacity: 4)
            guard case .failure = ra, case .failure = rb else {
                Issue.record("the cut session should fail on both sides")
                return
            }
            #expect(try b.log.integrityProblems().isEmpty)
        }
        let partial = try b.log.eventCount()
        #expect(partial > 1 && partial < total)
        let (_, rb) = try await syncPair(a, b)
        #expect(rb.duplicatesReceived == 0)
        #expect(rb.eventsReceived + partial == total + 2)  // B's own device.added and device.key
        #expect(try feedHeads(a) == feedHeads(b))
        #expect(try digest(a) == digest(b))
        await a.close()
        await b.close()
    }
}

func pictureBytesHash(_ seed: Int, size: Int = 150_000) -> Hash32 { Blake2b.hash256(pictureBytes(seed, size: size)) }

enum BlobCheck {
    /// Live pictures whose blob the node lacks.
    static func missing(_ node: Node) throws -> Int {
        var n = 0
        for (author, _) in try node.heads() {
            for p in try node.projections.pictures(of: try node.projections.user(of: author)) {
                if let blob = p.blob, try node.blobs.read(blob) == nil { n += 1 }
            }
        }
        return n
    }
}

import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusSync
import ChorusTestSupport
import Foundation
import Synchronization
import Testing

/// First contact through sessions (Specs/sync.md §4.2.1).
@Suite("First contact by reconciliation", .closingNodes)
struct ReconcileSessionTests {
    @Test("nodes holding the same 2,000 feeds that never met agree in one round and under 1 KB; without reconcile they announce every feed")
    func identicalStores() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let a = try await makeNode(dir, "a", network: net)
        let b = try await makeNode(dir, "b", network: net)
        let c = try await makeNode(dir, "c", network: net)
        let shared = try manyEvents(feeds: 2000, perFeed: 1, padding: 0, seed: 1)
        for node in [a, b, c] { #expect(await node.ingest(events: shared).accepted == 2000) }
        // The nodes' own feeds (device bindings) differ; make them equal too.
        _ = try await syncPair(a, b, remember: false)
        _ = try await syncPair(b, c, remember: false)
        _ = try await syncPair(a, b, remember: false)
        #expect(try feedHeads(a) == feedHeads(c))

        let (ra, rb) = try await syncPair(a, c, remember: false)
        #expect(ra.complete && rb.complete && ra.reconciled && rb.reconciled)
        #expect(ra.reconcileRounds == 1 && ra.eventsReceived == 0 && ra.eventsSent == 0)
        let reconciledBytes = ra.bytesSent + ra.bytesReceived
        #expect(reconciledBytes < 1024)

        var off = SyncOptions.patient
        off.reconcile = false
        off.sketch = false
        let (fa, fc) = try await syncPair(a, c, optionsA: off, remember: false)
        #expect(fa.complete && fc.complete && !fa.reconciled && !fc.reconciled)
        let announcedBytes = fa.bytesSent + fa.bytesReceived
        #expect(announcedBytes > 100 * reconciledBytes)
        print("first contact, 2,000+ identical feeds: \(reconciledBytes) bytes reconciled, \(announcedBytes) bytes announced")
        for n in [a, b, c] { await n.close() }
    }

    @Test("differences found by reconciliation are fetched both ways and the nodes converge")
    func differences() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let a = try await makeNode(dir, "a", network: net)
        let b = try await makeNode(dir, "b", network: net)
        let shared = try manyEvents(feeds: 1500, perFeed: 1, padding: 0, seed: 1)
        let onlyA = try manyEvents(feeds: 12, perFeed: 1, padding: 0, seed: 2)
        let onlyB = try manyEvents(feeds: 7, perFeed: 1, padding: 0, seed: 3)
        #expect(await a.ingest(events: shared + onlyA).accepted == 1512)
        #expect(await b.ingest(events: shared + onlyB).accepted == 1507)
        // B is behind on two feeds A extended.
        _ = try await a.setProfile(.bio, .text("a later edit"))
        let (ra, rb) = try await syncPair(a, b)
        #expect(ra.complete && rb.complete && ra.reconciled)
        #expect(try feedHeads(a) == feedHeads(b))
        #expect(try digest(a) == digest(b))
        #expect(ra.eventsReceived == rb.eventsSent && rb.eventsReceived == ra.eventsSent)
        #expect(ra.bytesSent + ra.bytesReceived < 40_000)
        // Remembered now: the next sync announces by position, not by reconciliation.
        let (again, _) = try await syncPair(a, b)
        #expect(again.complete && !again.reconciled)
        await a.close()
        await b.close()
    }

    static func event(_ key: SigningKey, seq: UInt64, prev: EventID?, text: String) throws -> Event {
        try Event.sign(
            with: key, seq: seq, prev: prev, hlc: HLC(physicalMillis: 1_700_000_000_000 + seq, logical: 0), kind: .profileSet,
            object: key.publicKey, payload: .textMap([("field", .text("bio")), ("value", .text(text))]))
    }

    @Test("by sketch (Specs/sync.md §4.2.2): feeds on one side only, ahead on either side, forked at the same height and below: the nodes converge and each fork is kept as evidence")
    func sketchDifferences() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let a = try await makeNode(dir, "a", network: net)
        let b = try await makeNode(dir, "b", network: net)
        let keys = (0..<800).map { _ in SigningKey.generate() }
        var chains: [[Event]] = []
        for key in keys {
            let e1 = try Self.event(key, seq: 1, prev: nil, text: "1")
            let e2 = try Self.event(key, seq: 2, prev: e1.id, text: "2")
            chains.append([e1, e2, try Self.event(key, seq: 3, prev: e2.id, text: "3")])
        }
        let shared = chains.flatMap { $0.prefix(2) }
        #expect(await a.ingest(events: shared).accepted == 1600)
        #expect(await b.ingest(events: shared).accepted == 1600)
        #expect(await a.ingest(events: try manyEvents(feeds: 5, perFeed: 3, padding: 0, seed: 22)).accepted == 15)
        #expect(await b.ingest(events: try manyEvents(feeds: 4, perFeed: 2, padding: 0, seed: 23)).accepted == 8)
        // B is ahead on 3 shared feeds, A on 2 (their next events).
        let extended = chains.map { $0[2] }
        #expect(await b.ingest(events: Array(extended.prefix(3))).accepted == 3)
        #expect(await a.ingest(events: Array(extended.suffix(2))).accepted == 2)
        // Forks: another event at the same height, and one below a longer chain.
        let same = SigningKey.generate(), below = SigningKey.generate()
        let s1 = try Self.event(same, seq: 1, prev: nil, text: "one"), s1b = try Self.event(same, seq: 1, prev: nil, text: "other")
        let b1 = try Self.event(below, seq: 1, prev: nil, text: "1")
        let b2 = try Self.event(below, seq: 2, prev: b1.id, text: "2"), b3 = try Self.event(below, seq: 3, prev: b2.id, text: "3")
        let b2x = try Self.event(below, seq: 2, prev: b1.id, text: "2, forked")
        #expect(await a.ingest(events: [s1, b1, b2, b3]).accepted == 4)
        #expect(await b.ingest(events: [s1b, b1, b2x]).accepted == 3)

        let (ra, rb) = try await syncPair(a, b)
        #expect(ra.complete && rb.complete && ra.sketched && rb.sketched)
        let forked: Set<PublicKey> = [same.publicKey, below.publicKey]
        let headsA = try a.heads().filter { !forked.contains($0.author) }.map { "\($0.author.hex) \($0.head.seq) \($0.head.id.hex)" }
        let headsB = try b.heads().filter { !forked.contains($0.author) }.map { "\($0.author.hex) \($0.head.seq) \($0.head.id.hex)" }
        #expect(headsA == headsB)
        let evidence = Set(try a.forks().map(\.author)).union(try b.forks().map(\.author))
        #expect(evidence == forked, "each fork is kept as evidence")
        // About 20 feeds differ (the nodes' own feeds, 9 one-sided, 5 ahead, 2 forked).
        let bytes = ra.bytesSent + ra.bytesReceived
        print("by sketch: \(bytes) frame bytes in all, \(ra.reconcileRounds) rounds, \(ra.eventsReceived + ra.eventsSent) events moved")
        #expect(ra.reconcileRounds <= 3 && bytes < 20_000)
        await a.close()
        await b.close()
    }

    @Test("sets too far apart for a sketch fall back to the reconciliation tree, and a peer offering only the tree gets the tree")
    func sketchFallsBack() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let a = try await makeNode(dir, "a", network: net)
        let b = try await makeNode(dir, "b", network: net)
        let c = try await makeNode(dir, "c", network: net)
        let many = try manyEvents(feeds: 1100, perFeed: 1, padding: 0, seed: 31)
        #expect(await a.ingest(events: many).accepted == 1100)
        let (ra, rb) = try await syncPair(a, b)
        #expect(ra.complete && rb.complete && ra.reconciled && !ra.sketched && !rb.sketched)
        #expect(try feedHeads(a) == feedHeads(b))
        var treeOnly = SyncOptions.patient
        treeOnly.sketch = false
        let (rc, _) = try await syncPair(c, a, optionsA: treeOnly)
        #expect(rc.complete && rc.reconciled && !rc.sketched)
        #expect(try feedHeads(a) == feedHeads(c))
        for n in [a, b, c] { await n.close() }
    }

    @Test("a peer without reconcile (an older node) still syncs by announcing every feed")
    func olderPeer() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let a = try await makeNode(dir, "a", network: net)
        let b = try await makeNode(dir, "b", network: net)
        #expect(await a.ingest(events: try manyEvents(feeds: 50, perFeed: 1, padding: 0, seed: 1)).accepted == 50)
        var old = SyncOptions.patient
        old.reconcile = false
        old.sketch = false
        let (ra, rb) = try await syncPair(a, b, optionsB: old)
        #expect(ra.complete && rb.complete && !ra.reconciled && !rb.reconciled)
        #expect(try feedHeads(a) == feedHeads(b))
        await a.close()
        await b.close()
    }
}

/// Specs/sync.md §5.1: what one side serves one peer per session is bounded.
@Suite("Per-session budgets", .closingNodes)
struct BudgetTests {
    @Test("a server with a budget of 100 events serves 250 in three sessions; the client's sync continues by itself; another peer is served meanwhile")
    func budgetSplitsAFetchIntoSessions() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let server = try await makeNode(dir, "server", network: net)
        let hungry = try await makeNode(dir, "hungry", network: net)
        let other = try await makeNode(dir, "other", network: net)
        let events = try manyEvents(feeds: 5, perFeed: 50, seed: 4)
        #expect(await server.ingest(events: events).accepted == 250)
        var options = SyncOptions.patient
        options.budget = SessionBudget(events: 100, bytes: 1 << 30)
        let sync = try SyncServer(node: server, options: options)
        let listener = try await sync.listen(host: "127.0.0.1", port: 0)

        // One session alone: 100 events, reported partial, the rest unasked.
        let (ta, tb) = MemoryTransport.pair(hungry.identity.device.raw, server.identity.device.raw)
        let client = try SyncSession(node: hungry, transport: ta, options: SyncOptions.patient, peers: nil)
        let serving = try SyncSession(node: server, transport: tb, options: options, peers: nil)
        let (one, _) = try await bounded(.seconds(120), "one budgeted session") {
            async let c = client.run()
            async let s = serving.run()
            return (try await c, try await s)
        }
        #expect(one.complete && one.partial)
        #expect(one.eventsReceived == 100)

        // The library's sync continues until nothing is missing.
        let port = listener.port
        let (report, otherReport) = try await bounded(.seconds(120), "budgeted syncs") {
            async let full = SyncNetwork.sync(hungry, host: "127.0.0.1", port: port, options: .patient)
            async let meanwhile = SyncNetwork.sync(other, host: "127.0.0.1", port: port, options: .patient)
            return (try await full, try await meanwhile)
        }
        #expect(report.complete && !report.partial)
        #expect(report.sessions >= 2)
        #expect(otherReport.complete && !otherReport.partial && otherReport.sessions >= 3)
        for author in Set(events.map(\.author)) {
            #expect(try hungry.head(of: author)?.seq == 50)
            #expect(try other.head(of: author)?.seq == 50)
        }
        await listener.shutdown()
        await sync.shutdown()
        for n in [server, hungry, other] { await n.close() }
    }
}

@Suite("Sync progress", .closingNodes)
struct SyncProgressTests {
    @Test("a session reports what it requested and what arrived, batch by batch, ending with every requested event received")
    func progressIsReported() async throws {
        let dir = SyncTempDir()
        defer { dir.cleanup() }
        let net = testNetwork()
        let a = try await makeNode(dir, "a", network: net)
        let b = try await makeNode(dir, "b", network: net)
        #expect(await a.ingest(events: try manyEvents(feeds: 4, perFeed: 600, seed: 9)).accepted == 2400)
        let seen = Mutex<[SyncProgress]>([])
        var options = SyncOptions.patient
        options.onProgress = { p in seen.withLock { $0.append(p) } }
        let (_, rb) = try await syncPair(a, b, optionsB: options)
        let steps = seen.withLock { $0 }
        #expect(steps.count >= 3)
        #expect(zip(steps, steps.dropFirst()).allSatisfy { $0.eventsReceived <= $1.eventsReceived && $0.eventsRequested <= $1.eventsRequested })
        #expect(steps.last?.eventsReceived == rb.eventsReceived + rb.duplicatesReceived)
        #expect(steps.last?.eventsRequested == rb.eventsRequested && rb.eventsRequested >= 2400)
    }
}

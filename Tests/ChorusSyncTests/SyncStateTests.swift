import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusNode
import ChorusSync
import Foundation
import Testing

/// The session's decisions driven directly, without a transport or a node
/// (Specs/sync.md §4.3–4.5, §5).
@Suite("Sync state machines without a transport", .closingNodes)
struct SyncStateTests {
    /// A store that holds `heads` and, for each, the ids below its head.
    struct Store: FeedLookup {
        var heads: [PublicKey: FeedHead] = [:]
        var ids: [PublicKey: [UInt64: EventID]] = [:]
        func head(of author: PublicKey) throws -> FeedHead? { heads[author] }
        func eventID(of author: PublicKey, at seq: UInt64) throws -> EventID? { ids[author]?[seq] }
    }

    static func key(_ b: UInt8) -> Bytes32 { Bytes32([UInt8](repeating: b, count: 32))! }

    /// A signed event of `author` at `seq` (the chain is not checked here).
    static func event(_ author: SigningKey, _ seq: UInt64) throws -> Event {
        try Event.sign(
            with: author, seq: seq, prev: seq == 1 ? nil : key(UInt8(seq & 0xFF)), hlc: HLC(physicalMillis: 1_700_000_000_000 + seq, logical: 0),
            kind: .profileSet, object: author.publicKey, payload: .textMap([("field", .text("bio")), ("value", .text("\(seq)"))]))
    }

    @Test("wants: lacking feeds from the next seq, equal heads nothing, equal heights with another head one position, out of scope nothing")
    func wants() throws {
        let behind = Self.key(1), equal = Self.key(2), forked = Self.key(3), unknown = Self.key(4), outside = Self.key(5)
        var store = Store()
        store.heads[behind] = FeedHead(seq: 3, id: Self.key(0x31), hlc: HLC(rawValue: 0))
        store.heads[equal] = FeedHead(seq: 5, id: Self.key(0x51), hlc: HLC(rawValue: 0))
        store.heads[forked] = FeedHead(seq: 4, id: Self.key(0x41), hlc: HLC(rawValue: 0))
        store.ids[forked] = [3: Self.key(0x39)]
        var fetch = FetchState()
        try fetch.have([
            FeedAnnouncement(author: behind, seq: 7, head: Self.key(0x71)), FeedAnnouncement(author: equal, seq: 5, head: Self.key(0x51)),
            FeedAnnouncement(author: forked, seq: 4, head: Self.key(0x42)), FeedAnnouncement(author: unknown, seq: 2, head: Self.key(0x21)),
            FeedAnnouncement(author: outside, seq: 9, head: Self.key(0x91)),
        ])
        #expect(fetch.haveEnd().count == 5)
        var asked: [PublicKey: UInt64] = [:]
        let wants = try fetch.wants(in: [behind, equal, forked, unknown], asked: &asked, store: store)
        #expect(
            wants == [
                FeedRange(author: behind, from: 4, prev: Self.key(0x31), to: 7),
                FeedRange(author: forked, from: 4, prev: Self.key(0x39), to: 4),
                FeedRange(author: unknown, from: 1, prev: nil, to: 2),
            ])
        // Asked once per round.
        #expect(try fetch.wants(in: nil, asked: &asked, store: store) == [FeedRange(author: outside, from: 1, prev: nil, to: 9)])
    }

    @Test("pushed events continue this node's head in order or are one event at its height; one that does not extend the head is skipped with the rest of its feed and asked at the height next round")
    func pushed() throws {
        let a = SigningKey.generate(), b = SigningKey.generate(), c = SigningKey.generate(), d = SigningKey.generate()
        let zero = HLC(rawValue: 0)
        var store = Store()
        store.heads[a.publicKey] = FeedHead(seq: 1, id: Self.key(2), hlc: zero)  // event 2's prev
        store.heads[b.publicKey] = FeedHead(seq: 2, id: Self.key(9), hlc: zero)  // not event 3's prev
        store.heads[c.publicKey] = FeedHead(seq: 4, id: Self.key(4), hlc: zero)
        var fetch = FetchState()
        #expect(throws: SyncError.self) { try fetch.accept(try Self.event(a, 2), store: store) }
        fetch.openPush()
        #expect(try fetch.accept(try Self.event(a, 2), store: store) == .event)
        #expect(try fetch.accept(try Self.event(a, 3), store: store) == .event)
        #expect(throws: SyncError.self) { try fetch.accept(try Self.event(a, 5), store: store) }
        #expect(try fetch.accept(try Self.event(b, 3), store: store) == .skipped)
        #expect(try fetch.accept(try Self.event(b, 4), store: store) == .skipped)
        #expect(try fetch.accept(try Self.event(c, 4), store: store) == .event, "fork evidence at this node's height")
        #expect(throws: SyncError.self) { try fetch.accept(try Self.event(c, 5), store: store) }
        #expect(throws: SyncError.self) { try fetch.accept(try Self.event(d, 2), store: store) }
        #expect(try fetch.accept(try Self.event(d, 1), store: store) == .event)
        fetch.closePush()
        #expect(throws: SyncError.self) { try fetch.accept(try Self.event(d, 2), store: store) }
        store.ids[b.publicKey] = [1: Self.key(0x21)]
        var asked: [PublicKey: UInt64] = [:]
        #expect(try fetch.wants(in: nil, asked: &asked, store: store) == [FeedRange(author: b.publicKey, from: 2, prev: Self.key(0x21), to: 2)])
    }

    @Test("received events must continue a requested range in order; a fork answer ends it; the rest is refused")
    func accepting() throws {
        let author = SigningKey.generate()
        var store = Store()
        store.heads[author.publicKey] = FeedHead(seq: 1, id: Self.key(1), hlc: HLC(rawValue: 0))
        var fetch = FetchState()
        try fetch.have([FeedAnnouncement(author: author.publicKey, seq: 3, head: Self.key(3))])
        _ = fetch.haveEnd()
        var asked: [PublicKey: UInt64] = [:]
        #expect(try fetch.wants(in: nil, asked: &asked, store: store).count == 1)
        var skipping = fetch
        #expect(throws: SyncError.self) { try skipping.accept(try Self.event(author, 3), store: store) }
        var copy = fetch
        let forkAnswer = try copy.accept(try Self.event(author, 1), store: store)
        #expect(forkAnswer == .event, "the server's different event at 1 is fork evidence")
        #expect(throws: SyncError.self) { try copy.accept(try Self.event(author, 2), store: store) }
        let second = try fetch.accept(try Self.event(author, 2), store: store)
        let third = try fetch.accept(try Self.event(author, 3), store: store)
        #expect(second == .event && third == .event)
        var beyond = fetch
        #expect(throws: SyncError.self) { try beyond.accept(try Self.event(author, 4), store: store) }
        #expect(throws: SyncError.self) { try beyond.accept(try Self.event(SigningKey.generate(), 1), store: store) }
        // A range left open at eventsEnd makes the round (and session) incomplete.
        var open = FetchState()
        try open.have([FeedAnnouncement(author: author.publicKey, seq: 3, head: Self.key(3))])
        _ = open.haveEnd()
        var asked2: [PublicKey: UInt64] = [:]
        _ = try open.wants(in: nil, asked: &asked2, store: store)
        open.startRound()
        open.eventsEnd()
        open.endRound()
        #expect(open.sessionIncomplete)
        #expect(!fetch.sessionIncomplete)
    }

    @Test("ingest outcomes: accepted, duplicates and refills counted; a fork kept; a future event marks the round incomplete; others end the session")
    func outcomes() throws {
        let author = SigningKey.generate()
        let e = try Self.event(author, 1)
        var fetch = FetchState()
        var report = SyncReport(peer: PeerIdentity(key: author.publicKey, address: "test"))
        try fetch.ingested(e, .accepted(e.id), refill: false, report: &report)
        try fetch.ingested(e, .duplicate(e.id), refill: false, report: &report)
        try fetch.ingested(e, .duplicate(e.id), refill: true, report: &report)
        try fetch.ingested(e, .refused(.fork(seq: 1, existing: Self.key(9))), refill: false, report: &report)
        #expect(report.eventsReceived == 1 && report.duplicatesReceived == 1 && report.payloadsRefilled == 1 && report.forksSeen == 1)
        fetch.startRound()
        try fetch.ingested(e, .refused(.timestampInFuture(aheadMillis: 120_000, driftMillis: 60_000)), refill: false, report: &report)
        #expect(fetch.roundIncomplete)
        var ending = fetch
        var r2 = report
        #expect(throws: SyncError.self) { try ending.ingested(e, .refused(.badSignature), refill: false, report: &r2) }
    }

    @Test("refills are asked once per session; invitations only to a scoped node, and bounded")
    func refillsAndInvitations() throws {
        var fetch = FetchState()
        #expect(fetch.refills(among: [Self.key(1), Self.key(2)]) == [Self.key(1), Self.key(2)])
        #expect(fetch.refills(among: [Self.key(1), Self.key(3)]) == [Self.key(3)])
        var unscoped = fetch
        #expect(throws: SyncError.self) { try unscoped.invite([Self.key(7)], scoped: false) }
        try fetch.invite([Self.key(7)], scoped: true)
        #expect(fetch.invited == [Self.key(7)])
    }

    @Test("blobs: chunks in order within the declared size and the limit, bytes that match the hash; misses and the end remembered")
    func blobs() throws {
        let bytes = (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let hash = Blake2b.hash256(bytes)
        var state = BlobFetchState(remembered: nil)
        #expect(state.request([(hash, UInt64(bytes.count)), (Self.key(5), nil)]) == [hash, Self.key(5)])
        let first = Array(bytes[0..<65_536]), second = Array(bytes[65_536...])
        #expect(throws: SyncError.self) {
            var s = state
            _ = try s.chunk(hash: hash, offset: 0, total: UInt64(bytes.count), bytes: first, limit: 100_000)
        }
        #expect(throws: SyncError.self) {
            var s = state
            _ = try s.chunk(hash: hash, offset: 65_536, total: UInt64(bytes.count), bytes: second, limit: 1 << 24)
        }
        let partial = try state.chunk(hash: hash, offset: 0, total: UInt64(bytes.count), bytes: first, limit: 1 << 24)
        #expect(partial == nil)
        let whole = try state.chunk(hash: hash, offset: 65_536, total: UInt64(bytes.count), bytes: second, limit: 1 << 24)
        #expect(whole == bytes)
        var after = state
        #expect(throws: SyncError.self) { _ = try after.chunk(hash: hash, offset: 0, total: 1, bytes: [1], limit: 10) }
        try state.missing(Self.key(5))
        var again = state
        #expect(throws: SyncError.self) { try again.missing(Self.key(6)) }
        #expect(state.lacked == [Self.key(5)])
        // The peer's serial unchanged since it lacked a blob: not asked again.
        var next = BlobFetchState(remembered: (serial: 4, lacked: [Self.key(5)]))
        try next.serial(4)
        var twice = next
        #expect(throws: SyncError.self) { try twice.serial(4) }
        #expect(next.request([(Self.key(5), nil), (Self.key(8), nil)]) == [Self.key(8)])
        next.end()
        #expect(next.lacked == [Self.key(5), Self.key(8)])
        var moved = BlobFetchState(remembered: (serial: 4, lacked: [Self.key(5)]))
        try moved.serial(5)
        #expect(moved.request([(Self.key(5), nil)]) == [Self.key(5)])
    }

    @Test("serving: the window shuts after its frames and reopens with acks; frames of at most 1024 events or 256 KiB")
    func serving() throws {
        var state = ServeState(window: 2)
        let taken = [state.takeCredit(for: .events), state.takeCredit(for: .events), state.takeCredit(for: .events)]
        #expect(taken == [true, true, false])
        try state.acknowledge(1)
        let again = state.takeCredit(for: .events)
        #expect(again)
        var over = state
        #expect(throws: SyncError.self) { try over.acknowledge(3) }
        var fresh = ServeState(window: 2)
        var early = fresh
        #expect(throws: SyncError.self) { try early.acknowledge(1) }
        // A blob frame (at most 64 KiB) takes a quarter of an events frame's
        // units (at most 256 KiB): four times as many fit, and an ack
        // returns the units of the oldest frames, whatever they were.
        var blobs = ServeState(window: 2)
        var tookBlobs: [Bool] = []
        for _ in 0..<9 { tookBlobs.append(blobs.takeCredit(for: .blob)) }
        #expect(tookBlobs == Array(repeating: true, count: 8) + [false])
        try blobs.acknowledge(4)
        let events = blobs.takeCredit(for: .events), blob = blobs.takeCredit(for: .blob)
        #expect(events && !blob)
        try blobs.acknowledge(5)
        #expect(blobs.credits == 8)
        #expect(throws: SyncError.self) { try blobs.acknowledge(1) }
        var frames: [[[UInt8]]] = []
        for _ in 0..<2400 { if let full = fresh.add([UInt8](repeating: 1, count: 100)) { frames.append(full) } }
        if let last = fresh.flush() { frames.append(last) }
        #expect(frames.map(\.count) == [1024, 1024, 352])
        // 256 KiB holds 873 envelopes of 300 bytes: the bytes end the frame first.
        for _ in 0..<1000 { if let full = fresh.add([UInt8](repeating: 3, count: 300)) { frames.append(full) } }
        if let last = fresh.flush() { frames.append(last) }
        #expect(frames.suffix(2).map(\.count) == [873, 127])
        for _ in 0..<3 { if let full = fresh.add([UInt8](repeating: 2, count: 100_000)) { frames.append(full) } }
        #expect(frames.last?.count == 2)
        let rest = fresh.flush(), none = fresh.flush()
        #expect(rest?.count == 1 && none == nil)
        try fresh.queue(ServeState.maxQueuedItems)
        var full = fresh
        #expect(throws: SyncError.self) { try full.queue(1) }
    }
}

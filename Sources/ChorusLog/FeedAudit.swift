import ChorusCrypto
import ChorusEvents
import ChorusParallel
import ChorusStorage

/// The feed checks of `LogStore.integrityProblems`, made in one pass over
/// the envelopes in arrival order (each read once, in key order) and then
/// one pass over each index in its key order: every feed's events are
/// consecutive from #1, chained and with increasing clocks, and the feed
/// positions, the id index and the heads name exactly the stored events. A
/// feed's events are stored in sequence order (a gap is never filled out of
/// order, Specs/storage.md §5.3), so the pass keeps only each feed's last
/// event besides the positions and ids it compares at the end. Index
/// entries naming arrivals after the last one observed are left out: on a
/// store a node is writing, they are events appended after the pass.
public struct FeedAudit: Sendable {
    private struct Last: Sendable {
        var seq: UInt64
        var id: EventID
        var hlc: HLC
    }
    /// What the pass keeps of one feed: its last event, and the position
    /// of each of its events. One entry per feed, so an event costs one
    /// lookup (a million of them in a verify pass).
    private struct Observed: Sendable {
        var last: Last? = nil
        var positions: [(seq: UInt64, arrival: UInt64)] = []
    }
    private var feeds: [PublicKey: Observed] = [:]
    private var ids: [(id: EventID, arrival: UInt64)] = []
    private var records = 0
    private var lastArrival: UInt64 = 0
    private var problems: [String] = []

    /// What the audit reads of an event: plain values, which a caller that
    /// decodes on other threads can keep instead of the event.
    public struct Link: Sendable {
        public let author: PublicKey
        public let seq: UInt64
        public let id: EventID
        public let prev: EventID?
        public let hlc: HLC

        package init(_ e: Event) {
            author = e.author
            seq = e.seq
            id = e.id
            prev = e.header.prev
            hlc = e.hlc
        }
    }

    public init() {}

    /// The event stored at `arrival`, in arrival order.
    package mutating func observe(_ e: Event, arrival: UInt64) { observe(Link(e), arrival: arrival) }

    /// `observe(_:arrival:)` of what the audit reads of the event.
    public mutating func observe(_ e: Link, arrival: UInt64) {
        records += 1
        lastArrival = max(lastArrival, arrival)
        ids.append((e.id, arrival))
        Self.extend(&feeds[e.author, default: Observed()], with: e, arrival: arrival, problems: &problems)
    }

    /// `feed` (`e`'s) with `e`, stored at `arrival`, observed next.
    private static func extend(_ feed: inout Observed, with e: Link, arrival: UInt64, problems: inout [String]) {
        let author = e.author
        feed.positions.append((e.seq, arrival))
        if let previous = feed.last {
            if e.seq != previous.seq + 1 {
                problems.append("feed \(author.hex) #\(e.seq): stored after #\(previous.seq)")
            } else {
                if e.prev != previous.id { problems.append("feed \(author.hex) #\(e.seq): does not chain to #\(previous.seq)") }
                if e.hlc <= previous.hlc { problems.append("feed \(author.hex) #\(e.seq): timestamp not increasing") }
            }
        } else if e.seq == 1, e.prev != nil {
            problems.append("feed \(author.hex) #1: prev is not null")
        }
        // A feed whose first stored event is not #1 shows in the positions check.
        feed.last = Last(seq: e.seq, id: e.id, hlc: e.hlc)
    }

    /// A stored record that does not decode (its finding is the caller's).
    public mutating func unreadable(arrival: UInt64) {
        records += 1
        lastArrival = max(lastArrival, arrival)
    }

    /// Compares what was observed with the feed positions, the id index and
    /// the heads, and returns every problem found. The id index (an entry
    /// per event) is read in two halves of its key space on two other
    /// threads while this one checks the positions and heads: at the end of
    /// a verify pass nothing else is left to keep the cores busy. Each part
    /// reads a snapshot of its own; entries appended after the pass are
    /// left out whichever snapshot shows them.
    public mutating func finish(_ log: LogStore) throws -> [String] {
        sortIDs()
        let audit = self
        // Each half reads both levels: the parts' problems then go in the
        // order one reader's would (each level in key order, main first).
        let halves = [
            Background { try log.env.read { txn in try [log.ids, log.recentIDs].map { try audit.scanIDs(log, in: txn, level: $0, before: [0x80]) } } },
            Background { try log.env.read { txn in try [log.ids, log.recentIDs].map { try audit.scanIDs(log, in: txn, level: $0, from: [0x80]) } } },
        ]
        let feedProblems: [String]
        do { feedProblems = try log.env.read { txn in try checkFeeds(log, in: txn) } } catch {
            for half in halves { _ = try? half.wait() }
            throw error
        }
        problems += feedProblems
        let (low, high) = (try halves[0].wait(), try halves[1].wait())
        problems += try Self.idProblems(ids, records: records, scanned: [low[0], high[0], low[1], high[1]])
        return problems
    }

    /// `finish` in the caller's read transaction, on this thread.
    public mutating func finish(_ log: LogStore, in txn: Transaction) throws -> [String] {
        sortIDs()
        problems += try checkFeeds(log, in: txn)
        problems += try Self.idProblems(ids, records: records, scanned: try [log.ids, log.recentIDs].map { try scanIDs(log, in: txn, level: $0) })
        return problems
    }

    /// The heads and the feed positions against the events observed.
    private func checkFeeds(_ log: LogStore, in txn: Transaction) throws -> [String] {
        var problems: [String] = []
        var heads: [PublicKey: FeedHead] = [:]
        try txn.scan(log.heads) { key, value in
            guard let author = Bytes32(key) else {
                problems.append("feed head with a key of \(key.count) bytes")
                return true
            }
            do { heads[author] = try LogStore.decodeHead(value) } catch { problems.append("feed \(author.hex): unreadable head") }
            return true
        }
        let advanced = try checkPositions(log, heads: heads, in: txn, problems: &problems)
        for (author, head) in heads.sorted(by: { $0.key < $1.key }) where !advanced.contains(author) {
            guard let stored = feeds[author]?.last else {
                problems.append("feed \(author.hex): the head names #\(head.seq), but no event of the feed is stored")
                continue
            }
            if stored.seq != head.seq || stored.id != head.id || stored.hlc != head.hlc {
                problems.append("feed \(author.hex): head does not match its last event")
            }
        }
        for author in feeds.keys.sorted() where heads[author] == nil { problems.append("feed \(author.hex): no head") }
        return problems
    }

    /// Each feed's positions, in key order (author, then sequence), against
    /// the events observed. Returns the feeds that grew after the pass.
    private func checkPositions(
        _ log: LogStore, heads: [PublicKey: FeedHead], in txn: Transaction, problems: inout [String]
    ) throws -> Set<PublicKey> {
        var listed: [PublicKey: [(seq: UInt64, arrival: UInt64)]] = [:]
        var advanced: Set<PublicKey> = []
        try txn.scan(log.positions) { key, value in
            guard let author = Bytes32(key) else {
                problems.append("feed position with a key of \(key.count) bytes")
                return true
            }
            do {
                let position = try LogStore.decodePosition(value)
                if position.arrival > lastArrival {
                    advanced.insert(author)
                } else {
                    listed[author, default: []].append(position)
                }
            } catch {
                problems.append("feed \(author.hex): \(error)")
            }
            return true
        }
        for author in Set(listed.keys).union(feeds.keys).sorted() {
            let stored = feeds[author]?.positions ?? []
            let named = listed[author] ?? []
            let head = heads[author].map { " (head is \($0.seq))" } ?? ""
            var i = 0
            var j = 0
            while i < stored.count || j < named.count {
                if j == named.count || (i < stored.count && stored[i].seq < named[j].seq) {
                    problems.append("feed \(author.hex): position \(stored[i].seq) missing\(head)")
                    i += 1
                } else if i == stored.count || named[j].seq < stored[i].seq {
                    problems.append(
                        "feed \(author.hex) #\(named[j].seq): its position names arrival \(named[j].arrival), which does not hold it")
                    j += 1
                } else {
                    if stored[i].arrival != named[j].arrival {
                        problems.append(
                            "feed \(author.hex) #\(named[j].seq): its position names arrival \(named[j].arrival), but it is stored at \(stored[i].arrival)")
                    }
                    i += 1
                    j += 1
                }
            }
        }
        return advanced
    }

    /// Observed in arrival order: sorted anyway (one pass over sorted
    /// input), to look events up by arrival.
    private mutating func sortIDs() { ids.sort { $0.arrival < $1.arrival } }

    /// What a read of part of the id index found: its problems, the
    /// observed events (by position in `ids`) it names, and its entries.
    private struct IDScan: Sendable {
        var problems: [String] = []
        var named: [Int] = []
        var indexed = 0
    }

    /// The entries of the id index's `level` with keys from `from` and
    /// before `end` (nil: no bound), in key order, against the events observed
    /// (`ids`, sorted by arrival): every entry names an arrival that holds
    /// an event whose id starts with the entry's prefix.
    private func scanIDs(
        _ log: LogStore, in txn: Transaction, level: Database, from: [UInt8]? = nil, before end: [UInt8]? = nil
    ) throws -> IDScan {
        let first = ids.first?.arrival ?? 0
        /// Where the event at `arrival` is in `ids`: at its distance from
        /// the first when no arrival is missing (a log's arrivals have no
        /// gaps), else found by bisection.
        func position(of arrival: UInt64) -> Int? {
            if arrival >= first, arrival - first < UInt64(ids.count), ids[Int(arrival - first)].arrival == arrival {
                return Int(arrival - first)
            }
            var low = 0
            var high = ids.count
            while low < high {
                let mid = (low + high) / 2
                if ids[mid].arrival < arrival { low = mid + 1 } else { high = mid }
            }
            return low < ids.count && ids[low].arrival == arrival ? low : nil
        }
        var scan = IDScan()
        // A million entries: read in place, not copied. An event is listed
        // in one of the two levels (Specs/storage.md §3).
        try txn.scanInPlace(level, from: from) { key, value in
            if let end, !key.lexicographicallyPrecedes(end) { return false }
            guard key.count == 8, value.count == 8 else {
                scan.indexed += 1
                scan.problems.append("an id index entry of \(key.count) and \(value.count) bytes")
                return true
            }
            let arrival = value.reduce(0) { $0 << 8 | UInt64($1) }
            if arrival > lastArrival { return true }  // appended after the pass
            scan.indexed += 1
            if let i = position(of: arrival), ids[i].id.withUnsafeBytes({ $0.prefix(8).elementsEqual(key) }) {
                scan.named.append(i)
            } else {
                scan.problems.append("the id index lists arrival \(arrival) under \(Hex.encode(Array(key))), which holds no event with an id starting so")
            }
            return true
        }
        return scan
    }

    /// The id index against the events observed, from the reads of its
    /// parts (in key order): besides each part's problems, every event is
    /// named under its id's prefix, and the index lists as many entries as
    /// events were stored.
    private static func idProblems(_ ids: [(id: EventID, arrival: UInt64)], records: Int, scanned: [IDScan]) throws -> [String] {
        var problems = scanned.flatMap(\.problems)
        var named = [Bool](repeating: false, count: ids.count)
        for part in scanned { for i in part.named { named[i] = true } }
        for (i, event) in ids.enumerated() where !named[i] {
            problems.append("the id index does not map \(event.id.hex) to arrival \(event.arrival)")
        }
        let indexed = scanned.reduce(0) { $0 + $1.indexed }
        if records != indexed { problems.append("\(records) events stored but \(indexed) in the id index") }
        return problems
    }
}

import ChorusCrypto
import ChorusEvents
import ChorusStorage
import ChorusParallel
import HeapModule
import Foundation

/// Where filing an event (`Projections.file`) writes its `facts` and
/// `index` entries: straight into a write transaction (the incremental
/// fold), or into sorted runs that a bulk rebuild appends in key order
/// (Specs/projections.md §9.2).
protocol FilingSink {
    mutating func put(_ db: Database, _ key: [UInt8], _ value: [UInt8]) throws
}

/// Files into one buffer per database, sorted by key before it is written:
/// a rebuild appends the entries of a whole slice of the log, so the
/// B-trees are written page after page instead of at random keys; a
/// commit puts its batch's in key order.
struct SortedRunSink: FilingSink {
    let factsDB: Database
    let indexDB: Database
    var facts = SortedEntries()
    var index = SortedEntries()

    mutating func put(_ db: Database, _ key: [UInt8], _ value: [UInt8]) throws {
        switch db {
        case factsDB: facts.add(key, value)
        case indexDB: index.add(key, value)
        default: preconditionFailure("filing writes only facts and index")
        }
    }
}

/// Key-value entries packed into one byte buffer (no allocation per entry),
/// written to a database in key order.
struct SortedEntries: Sendable {
    private var bytes: [UInt8] = []
    /// Each entry's offset in `bytes`, its key and value lengths, and its
    /// first eight key bytes as a big-endian number, which decides most
    /// comparisons without reading the buffer.
    fileprivate var records: [Record] = []

    struct Record {
        var offset: Int
        var keyCount: Int32
        var valueCount: Int32
        var head: UInt64
    }

    var count: Int { records.count }
    var byteCount: Int { bytes.count }

    mutating func add(_ key: [UInt8], _ value: [UInt8]) {
        var head: UInt64 = 0
        for i in 0..<8 { head = head << 8 | UInt64(i < key.count ? key[i] : 0) }
        records.append(Record(offset: bytes.count, keyCount: Int32(key.count), valueCount: Int32(value.count), head: head))
        bytes += key
        bytes += value
    }

    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        records.removeAll(keepingCapacity: true)
    }

    /// Sorts the entries by key (bytewise, a proper prefix first: LMDB's
    /// default order) and drops repeated keys, keeping the last value
    /// filed: what repeated puts of one key would leave.
    mutating func sort() {
        bytes.withUnsafeBytes { raw in
            func key(_ r: Record) -> UnsafeRawBufferPointer {
                UnsafeRawBufferPointer(rebasing: raw[r.offset..<(r.offset + Int(r.keyCount))])
            }
            // Stable on equal keys by offset, so the last filed value wins below.
            records.sort { a, b in
                if a.head != b.head { return a.head < b.head }
                let c = compare(key(a), key(b))
                return c != 0 ? c < 0 : a.offset < b.offset
            }
            var kept: [Record] = []
            kept.reserveCapacity(records.count)
            for r in records {
                if let last = kept.last, last.head == r.head, compare(key(last), key(r)) == 0 {
                    kept[kept.count - 1] = r
                } else {
                    kept.append(r)
                }
            }
            records = kept
        }
    }

    /// The index of the first entry (after `sort()`) whose key starts with
    /// a byte of at least `byte`.
    func firstIndex(startingWithAtLeast byte: UInt8) -> Int {
        // A record's `head` holds its first key bytes big-endian.
        var (low, high) = (0, records.count)
        while low < high {
            let mid = (low + high) / 2
            if records[mid].head >> 56 < UInt64(byte) { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// Entries `range` (after `sort()`), in a buffer of their own.
    func copy(_ range: Range<Int>) -> SortedEntries {
        var out = SortedEntries()
        out.records.reserveCapacity(range.count)
        for r in records[range] {
            let length = Int(r.keyCount) + Int(r.valueCount)
            out.records.append(Record(offset: out.bytes.count, keyCount: r.keyCount, valueCount: r.valueCount, head: r.head))
            out.bytes += bytes[r.offset..<(r.offset + length)]
        }
        return out
    }

    /// The first key, after `sort()`.
    var firstKey: [UInt8]? {
        guard let r = records.first else { return nil }
        return Array(bytes[r.offset..<(r.offset + Int(r.keyCount))])
    }

    /// Writes entries `range` (after `sort()`) in key order; with `append`,
    /// as LMDB appends (every key must then follow the database's last).
    func write(_ range: Range<Int>, to db: Database, in txn: Transaction, append: Bool) throws {
        try bytes.withUnsafeBytes { raw in
            for r in records[range] {
                let k = UnsafeRawBufferPointer(rebasing: raw[r.offset..<(r.offset + Int(r.keyCount))])
                let v = UnsafeRawBufferPointer(rebasing: raw[(r.offset + Int(r.keyCount))..<(r.offset + Int(r.keyCount) + Int(r.valueCount))])
                try txn.put(db, k, v, append: append)
            }
        }
    }
}

extension SortedEntries {
    /// Bytes this buffer holds, its per-entry records included: what a
    /// rebuild counts against its filing budget.
    var memoryBytes: Int { bytes.count + records.count * MemoryLayout<Record>.stride }

    /// Writes the entries of `runs`, each sorted, as one stream in key order;
    /// where runs share a key, the last run's value wins (it was filed
    /// later, as repeated puts would leave it). `chunk` entries go in one
    /// write transaction; with `append`, as LMDB appends. The runs are
    /// merged through a heap (a rebuild merges a few runs for each slice of
    /// the log it filed), on another thread, a chunk ahead of the writes
    /// (`pipelined`): the comparisons and the puts each take about half of
    /// this single write's time.
    /// With `below`, only the entries whose keys start with a byte under
    /// it; with `from`, only those starting with `from` or above.
    static func writeMerged(
        _ runs: [SortedEntries], below: UInt8? = nil, from: UInt8? = nil, to db: Database, in env: Environment, append: Bool,
        chunk: Int = 100_000
    ) throws {
        let runs = runs.filter { $0.count > 0 }
        let ranges = runs.map { run in
            (from.map { run.firstIndex(startingWithAtLeast: $0) } ?? 0)..<(below.map { run.firstIndex(startingWithAtLeast: $0) } ?? run.count)
        }
        guard ranges.contains(where: { !$0.isEmpty }) else { return }
        try withBytes(of: runs[...], []) { buffers in
            let merge = RunMerge(runs: runs, ranges: ranges, buffers: buffers)
            try pipelined(from: 0) { _ in
                let next = merge.next(chunk)
                return next.isEmpty ? nil : (next, 0)
            } consume: { entries in
                // The body runs again if the map grows (Environment.write):
                // the chunk is written whole in each attempt.
                try env.write { txn in
                    for entry in entries {
                        let run = Int(entry >> RunMerge.positionBits)
                        let r = runs[run].records[Int(entry & RunMerge.positionMask)]
                        let raw = buffers[run]
                        let k = UnsafeRawBufferPointer(rebasing: raw[r.offset..<(r.offset + Int(r.keyCount))])
                        let v = UnsafeRawBufferPointer(
                            rebasing: raw[(r.offset + Int(r.keyCount))..<(r.offset + Int(r.keyCount) + Int(r.valueCount))])
                        try txn.put(db, k, v, append: append)
                    }
                }
            }
        }
    }

    /// The merge of sorted runs into one stream in key order, handed out a
    /// chunk at a time. `@unchecked Sendable`: `pipelined` calls `next` on
    /// one thread at a time, and the runs' buffers outlive the pipeline
    /// (`writeMerged` holds them).
    private final class RunMerge: @unchecked Sendable {
        /// An entry of the stream: its run above `positionBits`, its
        /// position in the run below.
        static let positionBits: UInt64 = 40
        static let positionMask: UInt64 = (1 << positionBits) - 1

        /// A run's next entry, ordered by key, then by run: among equal
        /// keys the last run's entry comes out last.
        struct Next: Comparable {
            let run: Int
            let head: UInt64
            let key: UnsafeRawBufferPointer
            static func == (a: Next, b: Next) -> Bool { a.run == b.run }
            static func < (a: Next, b: Next) -> Bool {
                let c = a.head != b.head ? (a.head < b.head ? -1 : 1) : compare(a.key, b.key)
                return c != 0 ? c < 0 : a.run < b.run
            }
            func sameKey(_ other: Next) -> Bool { head == other.head && compare(key, other.key) == 0 }
        }

        private let runs: [SortedEntries]
        private let buffers: [UnsafeRawBufferPointer]
        /// Each run's position and where its entries to merge end, and the
        /// next entry of every run not yet handed out.
        private var positions: [Int]
        private let ends: [Int]
        private var heap = Heap<Next>()

        init(runs: [SortedEntries], ranges: [Range<Int>], buffers: [UnsafeRawBufferPointer]) {
            self.runs = runs
            self.buffers = buffers
            positions = ranges.map(\.lowerBound)
            ends = ranges.map(\.upperBound)
            for run in runs.indices { enter(run) }
        }

        /// Puts `run`'s entry at its position into the heap, unless the run is done.
        private func enter(_ run: Int) {
            guard positions[run] < ends[run] else { return }
            let r = runs[run].records[positions[run]]
            let key = UnsafeRawBufferPointer(rebasing: buffers[run][r.offset..<(r.offset + Int(r.keyCount))])
            heap.insert(Next(run: run, head: r.head, key: key))
        }

        /// The next `count` entries of the stream (fewer at its end): for
        /// each key the entry of the last run holding it, every other run
        /// holding that key moved past it.
        func next(_ count: Int) -> [UInt64] {
            var out: [UInt64] = []
            out.reserveCapacity(count)
            while out.count < count, var winner = heap.popMin() {
                while let top = heap.min, top.sameKey(winner), let later = heap.popMin() {
                    positions[winner.run] += 1
                    enter(winner.run)
                    winner = later
                }
                out.append(UInt64(winner.run) << Self.positionBits | UInt64(positions[winner.run]))
                positions[winner.run] += 1
                enter(winner.run)
            }
            return out
        }
    }

    /// Calls `body` with the byte buffers of all `runs` at once.
    private static func withBytes<R>(
        of runs: ArraySlice<SortedEntries>, _ held: [UnsafeRawBufferPointer], _ body: ([UnsafeRawBufferPointer]) throws -> R
    ) throws -> R {
        guard let first = runs.first else { return try body(held) }
        return try first.bytes.withUnsafeBytes { try withBytes(of: runs.dropFirst(), held + [$0], body) }
    }
}

/// Bytewise comparison, a proper prefix first.
private func compare(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
    let n = min(a.count, b.count)
    if n > 0, let pa = a.baseAddress, let pb = b.baseAddress {
        let c = memcmp(pa, pb, n)
        if c != 0 { return Int(c) }
    }
    return a.count - b.count
}

extension Projections {
    /// Visits the facts whose keys start with `prefix`, in key order, from
    /// both levels (Specs/projections.md §9.1), until `body` returns false.
    /// A fact filed again after it moved (a refilled event) is in both
    /// levels under one key: it is visited once, with the recent value.
    func scanFacts(prefix: [UInt8], in txn: Transaction, _ body: (_ key: [UInt8], _ value: [UInt8]) throws -> Bool) throws {
        for (key, value) in try factEntries(prefix: prefix, in: txn) {
            guard try body(key, value) else { return }
        }
    }

    /// Every fact whose key starts with `prefix`, in key order, from both
    /// levels, a key in both once with the recent value, collected: read
    /// with the point cursors of a write transaction, which a fold's
    /// lookups in key order keep near.
    /// Whether either level holds a fact of `object` merged after `order`:
    /// one seek each.
    func hasFact(after order: MergeOrder, of cls: ObjectClass, _ object: Bytes32, in txn: Transaction) throws -> Bool {
        try hasFactKey(Self.factKeyPrefix(cls, object), from: Self.factKey(cls, object, order) + [0], in: txn)
    }

    /// Whether `object` has a fact stamped at `hlc` or later (its keys'
    /// merge orders start with the HLC, §9.1): one seek in each level.
    func hasFact(at hlc: HLC, orLaterOf cls: ObjectClass, _ object: Bytes32, in txn: Transaction) throws -> Bool {
        let prefix = Self.factKeyPrefix(cls, object)
        return try hasFactKey(prefix, from: prefix + Codec.u64(hlc.rawValue), in: txn)
    }

    /// Whether either level holds a fact key under `prefix` at or after `from`.
    private func hasFactKey(_ prefix: [UInt8], from: [UInt8], in txn: Transaction) throws -> Bool {
        for db in [recentFacts, facts] {
            var found = false
            try txn.scanInPlace(db, from: from) { key, _ in
                found = key.starts(with: prefix)
                return false
            }
            if found { return true }
        }
        return false
    }

    func factEntries(prefix: [UInt8], in txn: Transaction) throws -> [(key: [UInt8], value: [UInt8])] {
        let recent = try txn.entries(recentFacts, prefix: prefix)
        let main = try txn.entries(facts, prefix: prefix)
        if recent.isEmpty { return main }
        if main.isEmpty { return recent }
        var out: [(key: [UInt8], value: [UInt8])] = []
        out.reserveCapacity(recent.count + main.count)
        var r = 0
        for entry in main {
            while r < recent.count, recent[r].key.lexicographicallyPrecedes(entry.key) {
                out.append(recent[r])
                r += 1
            }
            if r < recent.count, recent[r].key == entry.key {
                out.append(recent[r])
                r += 1
            } else {
                out.append(entry)
            }
        }
        out.append(contentsOf: recent[r...])
        return out
    }

    /// The fact under `key`, in whichever level holds it (the recent one
    /// first: it holds the later filing).
    func fact(_ key: [UInt8], in txn: Transaction) throws -> [UInt8]? {
        try txn.get(recentFacts, key) ?? txn.get(facts, key)
    }

    /// Moves facts from the recent level into the main one, in the caller's
    /// transaction, once the recent level holds more than its target:
    /// `recentFactsMinimum` entries, or 1/`recentFactsRatio` of the main
    /// level's when that is more (Specs/projections.md §9.1). It moves the
    /// excess, in key order, from where the last move stopped
    /// (`factsMergedKey`, wrapping round at the end), so successive commits
    /// walk the key space: a commit rewrites the main level's pages of one
    /// narrow key range, and each of its pages about once per walk, instead
    /// of all of them at once when the recent level would fill.
    func moveRecentFactsIfDue(in txn: Transaction) throws {
        let recent = try txn.count(recentFacts)
        let target = max(recentFactsMinimum, try txn.count(facts) / Self.recentFactsRatio)
        guard recent > target else { return }
        let wanted = recent - target
        let resume = try txn.get(index, Self.factsMergedKey).map { (key: $0, value: nil as [UInt8]?) }
        let moving = try txn.entriesAfter(recentFacts, cursor: resume, count: wanted)
        for (key, value) in moving {
            try txn.put(facts, key, value)
            try txn.delete(recentFacts, key)
        }
        if let last = moving.last { try txn.put(index, Self.factsMergedKey, last.key) }
    }
}

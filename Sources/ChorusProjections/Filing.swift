import ChorusStorage
import Foundation

/// Where filing an event (`Projections.file`) writes its `facts` and
/// `index` entries (and, in a rebuild, a withdrawn `message` entry per
/// send): straight into a write transaction (the incremental
/// fold), or into sorted runs that a bulk rebuild appends in key order
/// (Specs/projections.md §9.2).
protocol FilingSink {
    mutating func put(_ db: Database, _ key: [UInt8], _ value: [UInt8]) throws
}

/// Files into the caller's write transaction.
struct TransactionSink: FilingSink {
    let txn: Transaction
    func put(_ db: Database, _ key: [UInt8], _ value: [UInt8]) throws { try txn.put(db, key, value) }
}

/// Files into one buffer per database, for a rebuild: the entries of a
/// whole slice of the log are sorted by key and then appended, so the
/// B-trees are written page after page instead of at random keys.
struct SortedRunSink: FilingSink {
    let factsDB: Database
    let indexDB: Database
    let stateDB: Database
    var facts = SortedEntries()
    var index = SortedEntries()
    var state = SortedEntries()

    mutating func put(_ db: Database, _ key: [UInt8], _ value: [UInt8]) throws {
        switch db {
        case factsDB: facts.add(key, value)
        case indexDB: index.add(key, value)
        case stateDB: state.add(key, value)
        default: preconditionFailure("filing writes only facts, index and state")
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
    private var records: [Record] = []

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
    /// merged through a binary heap (a rebuild merges a few runs for each
    /// slice of the log it filed).
    static func writeMerged(
        _ runs: [SortedEntries], to db: Database, in env: Environment, append: Bool, chunk: Int = 100_000
    ) throws {
        let runs = runs.filter { $0.count > 0 }
        try withBytes(of: runs[...], []) { buffers in
            /// The merge's state: each run's next entry, and the runs not
            /// yet written out, as a heap ordered by (next key, run).
            struct Merge {
                var positions: [Int]
                var heap: [Int]
            }
            func key(_ run: Int, _ m: Merge) -> UnsafeRawBufferPointer {
                let r = runs[run].records[m.positions[run]]
                return UnsafeRawBufferPointer(rebasing: buffers[run][r.offset..<(r.offset + Int(r.keyCount))])
            }
            func order(_ a: Int, _ b: Int, _ m: Merge) -> Int {
                let x = runs[a].records[m.positions[a]].head, y = runs[b].records[m.positions[b]].head
                if x != y { return x < y ? -1 : 1 }
                return compare(key(a, m), key(b, m))
            }
            func precedes(_ a: Int, _ b: Int, _ m: Merge) -> Bool {
                let c = order(a, b, m)
                return c != 0 ? c < 0 : a < b
            }
            func push(_ run: Int, _ m: inout Merge) {
                m.heap.append(run)
                var i = m.heap.count - 1
                while i > 0 {
                    let parent = (i - 1) / 2
                    guard precedes(m.heap[i], m.heap[parent], m) else { break }
                    m.heap.swapAt(i, parent)
                    i = parent
                }
            }
            func popFirst(_ m: inout Merge) -> Int? {
                guard let first = m.heap.first else { return nil }
                let last = m.heap.removeLast()
                if !m.heap.isEmpty {
                    m.heap[0] = last
                    var i = 0
                    while true {
                        let l = 2 * i + 1, r = l + 1
                        var least = i
                        if l < m.heap.count, precedes(m.heap[l], m.heap[least], m) { least = l }
                        if r < m.heap.count, precedes(m.heap[r], m.heap[least], m) { least = r }
                        if least == i { break }
                        m.heap.swapAt(i, least)
                        i = least
                    }
                }
                return first
            }
            /// Moves `run` past its next entry, back into the heap unless it is done.
            func advance(_ run: Int, _ m: inout Merge) {
                m.positions[run] += 1
                if m.positions[run] < runs[run].records.count { push(run, &m) }
            }
            /// The run holding the next entry to write (the smallest key;
            /// among equal keys, the last run), every other run holding
            /// that key moved past it; nil when all are written.
            func next(_ m: inout Merge) -> Int? {
                guard var winner = popFirst(&m) else { return nil }
                while let top = m.heap.first, order(top, winner, m) == 0, let later = popFirst(&m) {
                    advance(winner, &m)
                    winner = later
                }
                return winner
            }
            var merge = Merge(positions: [Int](repeating: 0, count: runs.count), heap: [])
            for run in runs.indices { push(run, &merge) }
            var done = false
            while !done {
                // The body runs again from the same point if the map grows
                // (Environment.write), so it starts from a copy.
                let resume = merge
                try env.write { txn in
                    merge = resume
                    for _ in 0..<chunk {
                        guard let run = next(&merge) else {
                            done = true
                            return
                        }
                        let r = runs[run].records[merge.positions[run]]
                        let raw = buffers[run]
                        let k = UnsafeRawBufferPointer(rebasing: raw[r.offset..<(r.offset + Int(r.keyCount))])
                        let v = UnsafeRawBufferPointer(
                            rebasing: raw[(r.offset + Int(r.keyCount))..<(r.offset + Int(r.keyCount) + Int(r.valueCount))])
                        try txn.put(db, k, v, append: append)
                        advance(run, &merge)
                    }
                }
            }
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

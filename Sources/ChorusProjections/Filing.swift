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
    /// write transaction; with `append`, as LMDB appends.
    static func writeMerged(
        _ runs: [SortedEntries], to db: Database, in env: Environment, append: Bool, chunk: Int = 100_000
    ) throws {
        let runs = runs.filter { $0.count > 0 }
        try withBytes(of: runs[...], []) { buffers in
            var positions = [Int](repeating: 0, count: runs.count)
            func key(_ run: Int) -> UnsafeRawBufferPointer {
                let r = runs[run].records[positions[run]]
                return UnsafeRawBufferPointer(rebasing: buffers[run][r.offset..<(r.offset + Int(r.keyCount))])
            }
            /// The run holding the next entry to write (the smallest key;
            /// among equal keys, the last run), every other run holding
            /// that key moved past it; nil when all are written.
            func next() -> Int? {
                var best: Int? = nil
                var equal: [Int] = []
                for run in runs.indices where positions[run] < runs[run].records.count {
                    guard let b = best else {
                        best = run
                        continue
                    }
                    let x = runs[run].records[positions[run]].head, y = runs[b].records[positions[b]].head
                    let c = x != y ? (x < y ? -1 : 1) : compare(key(run), key(b))
                    if c < 0 {
                        best = run
                        equal.removeAll()
                    } else if c == 0 {
                        equal.append(b)
                        best = run
                    }
                }
                for run in equal { positions[run] += 1 }
                return best
            }
            var done = false
            while !done {
                try env.write { txn in
                    for _ in 0..<chunk {
                        guard let run = next() else {
                            done = true
                            return
                        }
                        let r = runs[run].records[positions[run]]
                        let raw = buffers[run]
                        let k = UnsafeRawBufferPointer(rebasing: raw[r.offset..<(r.offset + Int(r.keyCount))])
                        let v = UnsafeRawBufferPointer(
                            rebasing: raw[(r.offset + Int(r.keyCount))..<(r.offset + Int(r.keyCount) + Int(r.valueCount))])
                        try txn.put(db, k, v, append: append)
                        positions[run] += 1
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

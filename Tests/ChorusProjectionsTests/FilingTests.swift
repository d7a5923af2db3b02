import ChorusStorage
import Foundation
@testable import ChorusProjections
import ChorusTestSupport
import Testing

@Suite("A rebuild's filed runs, merged into the store (Specs/projections.md §9.2)")
struct FilingTests {
    /// Random runs over a small key space, so that runs share keys and
    /// keys are prefixes of others; each run sorted as the filing sorts it.
    static func runs(_ rng: inout SplitMix64, count: Int) -> [SortedEntries] {
        (0..<count).map { _ in
            var run = SortedEntries()
            for _ in 0..<rng.int(0...60) {
                let key = (0..<rng.int(1...3)).map { _ in UInt8(rng.int(0...3)) } + (rng.int(0...3) == 0 ? Array(repeating: 9, count: 9) : [])
                run.add(key, (0..<rng.int(0...5)).map { _ in UInt8(rng.int(0...255)) })
            }
            run.sort()
            return run
        }
    }

    /// What repeated puts of every run's entries, run after run, leave.
    static func expected(_ runs: [[(key: [UInt8], value: [UInt8])]], over start: [[UInt8]: [UInt8]] = [:]) -> [[UInt8]: [UInt8]] {
        var map = start
        for run in runs { for (k, v) in run { map[k] = v } }
        return map
    }

    /// Every entry `table` holds.
    static func contents(of table: Database, in env: Environment) throws -> [[UInt8]: [UInt8]] {
        try env.read { txn in
            var map: [[UInt8]: [UInt8]] = [:]
            try txn.scan(table) { k, v in
                map[k] = v
                return true
            }
            return map
        }
    }

    static func entries(_ run: SortedEntries, in env: Environment, scratch db: Database) throws -> [(key: [UInt8], value: [UInt8])] {
        // Read back through a scratch database: the runs' own order.
        try env.write { txn in try txn.clear(db) }
        try SortedEntries.writeMerged([run], to: db, in: env, append: true)
        return try env.read { txn in
            var out: [([UInt8], [UInt8])] = []
            try txn.scan(db) { k, v in
                out.append((k, v))
                return true
            }
            return out
        }
    }

    @Test("merged runs equal the puts of every run in filing order, appended into an empty table or put over earlier entries, across transactions")
    func mergeEqualsRepeatedPuts() throws {
        let dir = try scratchDirectory("filing")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let env = try Environment(path: dir, initialMapSize: 16 << 20)
        let table = try env.openDatabase("table")
        let scratch = try env.openDatabase("scratch")
        var rng = SplitMix64(seed: 0xF1_11)
        for _ in 0..<40 {
            try env.write { txn in try txn.clear(table) }
            let first = Self.runs(&rng, count: rng.int(1...24))
            let second = Self.runs(&rng, count: rng.int(1...6))
            let firstEntries = try first.map { try Self.entries($0, in: env, scratch: scratch) }
            let secondEntries = try second.map { try Self.entries($0, in: env, scratch: scratch) }
            // Each run is in strictly ascending key order (sorted, repeats dropped).
            for run in firstEntries + secondEntries {
                #expect(zip(run, run.dropFirst()).allSatisfy { $0.key.lexicographicallyPrecedes($1.key) })
            }
            // The first merge appends (MDB_APPEND fails on a key out of order),
            // whole or as the keys under a first byte and then the others
            // (as a rebuild writes device bindings' facts first).
            if rng.int(0...1) == 0 {
                let cut = UInt8(rng.int(0...4))  // keys start with 0 to 3
                try SortedEntries.writeMerged(first, below: cut, to: table, in: env, append: true, chunk: rng.int(1...20))
                try SortedEntries.writeMerged(first, from: cut, to: table, in: env, append: true, chunk: rng.int(1...20))
            } else {
                try SortedEntries.writeMerged(first, to: table, in: env, append: true, chunk: rng.int(1...20))
            }
            try SortedEntries.writeMerged(second, to: table, in: env, append: false, chunk: rng.int(1...20))
            let stored = try Self.contents(of: table, in: env)
            let expected = Self.expected(firstEntries + secondEntries)
            let wrong = Set(stored.keys).union(expected.keys).filter { stored[$0] != expected[$0] }
            #expect(wrong.isEmpty, "\(wrong.count) keys differ from repeated puts, e.g. \(wrong.first.map { "\($0): \(stored[$0] ?? []) instead of \(expected[$0] ?? [])" } ?? "")")
        }
    }

    @Test("a merge whose transaction is run again after the map grows writes every entry once")
    func mergeAcrossMapGrowth() throws {
        let dir = try scratchDirectory("filing-growth")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let env = try Environment(path: dir, initialMapSize: 256 << 10)
        let table = try env.openDatabase("table")
        var rng = SplitMix64(seed: 0x6_20_77)
        // Three runs of distinct keys, about 1.5 MB in all: several times
        // the initial map, so a transaction fails full and runs again.
        var runs = [SortedEntries(), SortedEntries(), SortedEntries()]
        var expected: [[UInt8]: [UInt8]] = [:]
        for i in 0..<12_000 {
            let key = (0..<8).map { _ in UInt8(rng.int(0...255)) } + [UInt8(i & 0xFF), UInt8(i >> 8)]
            let value = [UInt8](repeating: UInt8(i & 0xFF), count: 100)
            runs[i % 3].add(key, value)
            expected[key] = value
        }
        for i in runs.indices { runs[i].sort() }
        let start = env.mapSize
        try SortedEntries.writeMerged(runs, to: table, in: env, append: true, chunk: 5_000)
        #expect(env.mapSize > start)  // grown: a transaction was run again
        let stored = try Self.contents(of: table, in: env)
        let wrong = expected.keys.filter { stored[$0] != expected[$0] }.count
        #expect(stored.count == expected.count && wrong == 0, "\(stored.count) entries stored of \(expected.count), \(wrong) missing or different")
    }

    @Test("the payloads kept for the fold are found by arrival, purged ones as purged, across appended runs, and no others")
    func filedPayloadsAreFoundByArrival() {
        var rng = SplitMix64(seed: 7)
        var expected: [UInt64: [UInt8]?] = [:]
        var all = FiledPayloads()
        var arrival: UInt64 = 0
        for _ in 0..<20 {
            var run = FiledPayloads()
            for _ in 0..<rng.int(0...30) {
                arrival += UInt64(rng.int(1...3))
                let payload: [UInt8]? = rng.int(0...4) == 0 ? nil : (0..<rng.int(0...9)).map { _ in UInt8(rng.int(0...255)) }
                run.add(arrival, payload)
                expected[arrival] = .some(payload)
            }
            all.append(run)
        }
        #expect(all.count == expected.count)
        for a in 0...(arrival + 1) {
            let found = all.payload(at: a)
            #expect(found == expected[a], "arrival \(a)")
        }
    }
}

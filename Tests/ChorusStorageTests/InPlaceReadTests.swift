import ChorusStorage
import ChorusTestSupport
import Foundation
import Testing

@Suite("Values read where LMDB holds them (ChorusStorage)")
struct InPlaceReadTests {
    /// `withValue` hands the body exactly the stored bytes, or nil for a
    /// key the table does not hold, and returns what the body returns.
    @Test func withValueSeesTheStoredBytesOrNil() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let env = try dir.freshEnvironment("read")
        let db = try env.openDatabase("table")
        let big = (0..<5_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }  // an overflow page
        try env.write { txn in
            try txn.put(db, [1], [9, 8, 7])
            try txn.put(db, [2], big)
            try txn.put(db, [3], [])
        }
        let (one, two, three, four) = try env.read { txn in
            (
                try txn.withValue(db, [1]) { $0.map(Array.init) },
                try txn.withValue(db, [2]) { $0.map(Array.init) },
                try txn.withValue(db, [3]) { $0?.count },
                try txn.withValue(db, [4]) { $0 == nil }
            )
        }
        #expect(one == [9, 8, 7])
        #expect(two == big)
        #expect(three == 0)
        #expect(four)
        // Inside the writer's own transaction it sees that transaction's writes.
        let written = try env.write { txn in
            try txn.put(db, [4], [4, 4])
            return try txn.withValue(db, [4]) { $0.map(Array.init) }
        }
        #expect(written == [4, 4])
    }

    /// `scanInPlace` visits every entry in key order with exactly the
    /// stored bytes (a duplicate table's values each on their own), and
    /// stops when the body returns false.
    @Test func scanInPlaceVisitsEveryEntryInKeyOrderAndStops() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let env = try dir.freshEnvironment("scan")
        let db = try env.openDatabase("table")
        let dups = try env.openDatabase("dups", fixedSizeDuplicates: true)
        let big = (0..<5_000).map { UInt8(truncatingIfNeeded: $0 &* 11) }  // an overflow page
        let entries: [([UInt8], [UInt8])] = [([2], big), ([1, 0], []), ([1], [1])] + (0..<500).map { ([3] + bigEndianBytes(UInt64($0)), [UInt8(truncatingIfNeeded: $0)]) }
        try env.write { txn in
            for (k, v) in entries { try txn.put(db, k, v) }
            for v in [[0, 2], [0, 1]] as [[UInt8]] { try txn.putDuplicate(dups, [7], v, last: false) }
        }
        func scan(_ table: Database, stopAfter: Int = .max) throws -> [([UInt8], [UInt8])] {
            try env.read { txn in
                var seen: [([UInt8], [UInt8])] = []
                try txn.scanInPlace(table) { k, v in
                    seen.append((Array(k), Array(v)))
                    return seen.count < stopAfter
                }
                return seen
            }
        }
        let sorted = entries.sorted { $0.0.lexicographicallyPrecedes($1.0) }
        let all = try scan(db)
        #expect(all.map(\.0) == sorted.map(\.0))
        #expect(all.map(\.1) == sorted.map(\.1))
        #expect(try scan(db, stopAfter: 3).map(\.0) == [[1], [1, 0], [2]])
        #expect(try scan(dups).map(\.1) == [[0, 1], [0, 2]])
        #expect(try scan(try env.openDatabase("empty")).isEmpty)
    }
}

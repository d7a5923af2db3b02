import ChorusStorage
import ChorusTestSupport
import Foundation
import Testing

@Suite("The map grows ahead of a write transaction (ChorusStorage)")
struct MapGrowthTests {
    /// Once the file's pages pass half of the map, the next write
    /// transaction begins with the map doubled, so its body runs once; a
    /// transaction that still fills the map runs again after growing, and
    /// both keep every entry.
    @Test func growsBeforeTheTransactionThatWouldFillIt() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let env = try dir.freshEnvironment("grow")
        let db = try env.openDatabase("table")
        let value = [UInt8](repeating: 7, count: 100)
        func key(_ i: Int) -> [UInt8] { withUnsafeBytes(of: UInt32(i).bigEndian, Array.init) }
        let start = env.mapSize

        // About 220 KB: under half of the 1 MiB map, which stays as it is.
        var runs = 0
        try env.write { txn in
            runs += 1
            for i in 0..<2_000 { try txn.put(db, key(i), value) }
        }
        #expect(runs == 1)
        try env.write { _ in }
        #expect(env.mapSize == start)

        // Past half of the map: the next transaction begins with it doubled.
        try env.write { txn in
            for i in 2_000..<5_000 { try txn.put(db, key(i), value) }
        }
        runs = 0
        try env.write { txn in
            runs += 1
            try txn.put(db, key(5_000), value)
        }
        #expect(env.mapSize == 2 * start)
        #expect(runs == 1)

        // One transaction larger than the room left runs again after the map grows.
        runs = 0
        try env.write { txn in
            runs += 1
            for i in 5_001..<25_000 { try txn.put(db, key(i), value) }
        }
        #expect(runs == 2)
        #expect(env.mapSize > 2 * start)

        let count = try env.read { txn in
            var n = 0
            try txn.scan(db) { k, v in
                if v == value, k == key(n) { n += 1 }
                return true
            }
            return n
        }
        #expect(count == 25_000)
    }
}

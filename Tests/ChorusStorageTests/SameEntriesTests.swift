import ChorusStorage
import ChorusTestSupport
import Foundation
import Testing

@Suite("Two tables compared in place (ChorusStorage)")
struct SameEntriesTests {
    /// `hasSameEntries` is true exactly when two tables, in two
    /// environments, hold the same keys with the same values: a changed
    /// value, a value of another length, a key more on either side, or an
    /// empty side all count as different.
    @Test func sameKeysAndValuesOnlyAcrossEnvironments() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let a = try dir.freshEnvironment("a")
        let b = try dir.freshEnvironment("b")
        let ta = try a.openDatabase("state")
        let tb = try b.openDatabase("other")
        func same() throws -> Bool { try a.read { x in try b.read { y in try x.hasSameEntries(ta, as: tb, in: y) } } }
        #expect(try same())  // both empty
        let big = (0..<5_000).map { UInt8(truncatingIfNeeded: $0 &* 13) }  // an overflow page
        let entries: [([UInt8], [UInt8])] = [([1], [1, 2]), ([1, 0], []), ([2], big)] + (0..<3_000).map { ([3] + bigEndianBytes(UInt64($0)), [UInt8(truncatingIfNeeded: $0)]) }
        for env in [(a, ta), (b, tb)] {
            try env.0.write { txn in for (k, v) in entries { try txn.put(env.1, k, v) } }
        }
        #expect(try same())

        try b.write { txn in try txn.put(tb, [1], [1, 3]) }
        #expect(try !same())
        try b.write { txn in try txn.put(tb, [1], [1, 2, 0]) }
        #expect(try !same())
        try b.write { txn in try txn.put(tb, [1], [1, 2]) }
        #expect(try same())

        try a.write { txn in try txn.put(ta, [9], [9]) }  // one more at the end here
        #expect(try !same())
        try b.write { txn in try txn.put(tb, [9], [9]) }
        #expect(try same())
        try b.write { txn in try txn.put(tb, [0], []) }  // one more at the start there
        #expect(try !same())
        try b.write { txn in try txn.clear(tb) }
        #expect(try !same())
    }
}

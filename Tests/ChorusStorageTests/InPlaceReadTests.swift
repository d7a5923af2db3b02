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
}

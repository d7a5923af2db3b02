import ChorusNode
import ChorusProjections
import ChorusStorage
import ChorusTestSupport
import Testing

/// Bookkeeping beside the log (inboxes, routing memory, peers) writes
/// through the node's one writer (Specs/storage.md §5), not in write
/// transactions of its own.
@Suite("Bookkeeping writes through the writer", .closingNodes)
struct BookkeepingWriteTests {
    @Test("Node.write returns its work's result once durable; a reopened store holds it; a closed node refuses it")
    func writesThroughTheWriter() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        let db = try node.log.env.openDatabase("bookkeeping", create: true)
        let answer = try await node.write { txn -> Int in
            try txn.put(db, [1], [42])
            return 7
        }
        #expect(answer == 7)
        #expect(try node.log.env.read { txn in try txn.get(db, [1]) } == [42])
        // Mutations and bookkeeping share the writer: both commit, in order.
        _ = try await node.setProfile(.bio, .text("between"))
        try await node.write { txn in try txn.put(db, [2], [43]) }
        await node.close()
        await #expect(throws: (any Error).self) { try await node.write { txn in try txn.put(db, [3], [44]) } }

        let reopened = opened(try await Node.open(at: tmp.store("a")))
        let held = try reopened.log.env.openDatabase("bookkeeping", create: false)
        #expect(try reopened.log.env.read { txn in [try txn.get(held, [1]), try txn.get(held, [2]), try txn.get(held, [3])] } == [[42], [43], nil])
        #expect(try reopened.profile(of: reopened.identity.user).bio == "between")
    }
}

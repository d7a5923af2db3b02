import ChorusStorage
import ChorusTestSupport
import Foundation
import Testing

@Suite("Read transactions of one snapshot for a split read (ChorusStorage)")
struct SnapshotReadTests {
    /// `readSnapshot` hands out transactions that see one snapshot, each
    /// usable on a thread of its own: a commit made while they are open is
    /// seen by none of them, and by the next call.
    @Test func transactionsOfOneSnapshotAreReadOnOtherThreads() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let env = try dir.freshEnvironment("snapshot")
        let db = try env.openDatabase("table")
        try env.write { txn in for i in 0..<100 { try txn.put(db, [UInt8(i)], [1]) } }
        let seen = try env.readSnapshot(count: 3) { txns -> [UInt8] in
            #expect(txns.count == 3)
            // A commit after the transactions began: none of them sees it.
            let committed = DispatchSemaphore(value: 0)
            Thread {
                #expect(throws: Never.self) { try env.write { txn in for i in 0..<100 { try txn.put(db, [UInt8(i)], [2]) } } }
                committed.signal()
            }.start()
            committed.wait()
            // Each transaction read on a thread of its own, one at a time.
            let results = Locked<[Int: [UInt8]]>([:])
            let done = DispatchSemaphore(value: 0)
            for (n, txn) in txns.enumerated() {
                let reader = ReadOn(txn: txn)
                Thread {
                    var values: [UInt8] = []
                    try? reader.txn.scanInPlace(db) { _, value in
                        values.append(value.first ?? 0)
                        return true
                    }
                    results.with { $0[n] = values }
                    done.signal()
                }.start()
                done.wait()
            }
            return results.with { dict in (0..<3).map { dict[$0] ?? [] }.flatMap { $0 } }
        }
        #expect(seen == [UInt8](repeating: 1, count: 300))
        let after = try env.readSnapshot(count: 2) { txns in try txns.map { try $0.get(db, [42]) } }
        #expect(after == [[2], [2]])
    }
}

/// A transaction handed to another thread, as `readSnapshot`'s callers do.
private struct ReadOn: @unchecked Sendable {
    let txn: Transaction
}

/// A value shared by the test's threads.
private final class Locked<T>: @unchecked Sendable {
    private var value: T
    private let lock = NSLock()
    init(_ value: T) { self.value = value }
    func with<R>(_ body: (inout T) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&value)
    }
}

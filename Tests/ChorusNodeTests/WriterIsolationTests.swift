import ChorusLog
import ChorusProjections
import ChorusStorage
import ChorusTestSupport
import Dispatch
import Testing

@testable import ChorusNode

/// The writer commits the requests queued while it was busy in one
/// transaction (Specs/storage.md §5.1); one that cannot be written must not
/// fail the others: they are committed again one by one.
@Suite("Writer: a request that fails does not fail the others of its commit", .closingNodes)
struct WriterIsolationTests {
    struct Refused: Error {}

    @Test("of two requests queued into one transaction, the failing one fails and the other commits")
    func failingRequestIsIsolated() async throws {
        let tmp = TempDir()
        defer { tmp.cleanup() }
        let node = opened(try await Node.create(at: tmp.store("a"), network: NetworkConfig()))
        let db = try node.log.env.openDatabase("isolation", create: true)
        let writer = try #require(await node.writer)
        // Hold the writer's thread so that both requests queue behind it and
        // go into the next transaction together.
        let started = DispatchSemaphore(value: 0), gate = DispatchSemaphore(value: 0)
        writer.exclusively({ started.signal(); gate.wait() }, completion: { _ in })
        started.wait()
        // Queued synchronously, both behind the held job.
        let (answers, answer) = AsyncStream<(Int, Result<[AppendOutcome], any Error>)>.makeStream()
        writer.enqueue([], work: { _ in throw Refused() }, completion: { answer.yield((0, $0)) })
        writer.enqueue([], work: { txn in try txn.put(db, [1], [42]) }, completion: { answer.yield((1, $0)) })
        gate.signal()
        var results: [Int: Result<[AppendOutcome], any Error>] = [:]
        for await (index, result) in answers {
            results[index] = result
            if results.count == 2 { break }
        }
        let failed = try #require(results[0]), written = try #require(results[1])
        #expect(throws: Refused.self) { try failed.get() }
        #expect(throws: Never.self) { try written.get() }
        #expect(try node.log.env.read { txn in try txn.get(db, [1]) } == [42])
    }
}

import ChorusEvents
import ChorusLog
import ChorusStorage
import Foundation
import Synchronization

/// The single writer (brief decision 9). Requests queue up while a commit is
/// in flight and the next transaction takes all of them at once (group
/// commit). A request's completion runs only after its transaction is
/// durable. No write transaction spans a suspension point: each runs start
/// to finish on the writer's own thread.
final class GroupCommitWriter: Sendable {
    struct Request: Sendable {
        let events: [Event]
        let completion: @Sendable (Result<[AppendOutcome], any Error>) -> Void
    }

    /// The most events one transaction takes: LMDB keeps a write
    /// transaction's dirty pages in memory, so huge imports commit in slices.
    static let maxEventsPerTransaction = 8192

    private let thread: BatchingThread<Request>
    private let stats = CommitStatistics()

    init(log: LogStore, driftMillis: UInt64, nowMillis: @escaping @Sendable () -> UInt64) {
        let stats = self.stats
        thread = BatchingThread(name: "chorus-writer", maxWeight: Self.maxEventsPerTransaction, weight: { $0.events.count }) {
            batch in
            Self.commit(batch, log: log, now: nowMillis(), driftMillis: driftMillis, stats: stats)
        }
    }

    /// Queues `events` behind everything already queued (synchronously, so
    /// callers control the order) and calls `completion` once durable.
    func enqueue(_ events: [Event], completion: @escaping @Sendable (Result<[AppendOutcome], any Error>) -> Void) {
        if !thread.enqueue(Request(events: events, completion: completion)) { completion(.failure(NodeError.closed)) }
    }

    /// Finishes every queued request, then stops the thread.
    func close() { thread.close() }

    var statistics: (commits: Int, largestBatch: Int) { stats.value }

    private static func commit(
        _ batch: [Request], log: LogStore, now: UInt64, driftMillis: UInt64,
        stats: CommitStatistics
    ) {
        do {
            let outcomes: [[AppendOutcome]] = try log.env.write { txn in
                var context = try log.appendContext(in: txn, nowMillis: now, driftMillis: driftMillis)
                let outcomes = try batch.map { request in
                    try request.events.map { try log.append($0, in: txn, context: &context) }
                }
                try log.finish(context, in: txn)
                return outcomes
            }
            let size = batch.reduce(0) { $0 + $1.events.count }
            stats.record(batchSize: size)
            for (request, result) in zip(batch, outcomes) { request.completion(.success(result)) }
        } catch {
            // Nothing in this transaction was committed, so nothing was acknowledged.
            for request in batch { request.completion(.failure(error)) }
        }
    }
}

/// Transactions committed and the most events committed in one.
final class CommitStatistics: Sendable {
    private let state = Mutex<(commits: Int, largestBatch: Int)>((0, 0))
    var value: (commits: Int, largestBatch: Int) { state.withLock { $0 } }
    func record(batchSize: Int) {
        state.withLock { $0 = (commits: $0.commits + 1, largestBatch: max($0.largestBatch, batchSize)) }
    }
}

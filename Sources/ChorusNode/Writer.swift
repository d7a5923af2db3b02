import ChorusEvents
import ChorusLog
import ChorusStorage
import Foundation

/// The single writer (brief decision 9). Requests queue up while a commit is
/// in flight and the next transaction takes all of them at once (group
/// commit). A request's continuation resumes only after its transaction is
/// durable. The writer runs on a dedicated thread so a blocking `fsync`
/// never occupies a Swift concurrency thread, and no write transaction spans
/// a suspension point.
final class GroupCommitWriter: @unchecked Sendable {
    // Safety: `pending` and `stopped` are only touched under `condition`;
    // `log` is Sendable and only written from the writer thread.
    struct Request {
        let events: [Event]
        let completion: @Sendable (Result<[AppendOutcome], any Error>) -> Void
    }

    /// The most events one transaction takes: LMDB keeps a write
    /// transaction's dirty pages in memory, so huge imports commit in slices.
    static let maxEventsPerTransaction = 8192

    private let log: LogStore
    private let nowMillis: @Sendable () -> UInt64
    private let driftMillis: UInt64
    private let condition = NSCondition()
    private var pending: [Request] = []
    private var stopped = false
    private let done = DispatchSemaphore(value: 0)
    /// Largest number of events committed in one transaction (for tests and benchmarks).
    private(set) var largestBatch = 0
    private(set) var commits = 0

    init(log: LogStore, driftMillis: UInt64, nowMillis: @escaping @Sendable () -> UInt64) {
        self.log = log
        self.driftMillis = driftMillis
        self.nowMillis = nowMillis
        let thread = Thread { [self] in run() }
        thread.name = "chorus-writer"
        thread.start()
    }

    /// Queues `events` behind everything already queued (synchronously, so
    /// callers control the order) and calls `completion` once durable.
    func enqueue(_ events: [Event], completion: @escaping @Sendable (Result<[AppendOutcome], any Error>) -> Void) {
        condition.lock()
        if stopped {
            condition.unlock()
            completion(.failure(NodeError.closed))
            return
        }
        pending.append(Request(events: events, completion: completion))
        condition.signal()
        condition.unlock()
    }

    /// Finishes every queued request, then stops the thread.
    func close() {
        condition.lock()
        let wasStopped = stopped
        stopped = true
        condition.signal()
        condition.unlock()
        if !wasStopped { done.wait() }
    }

    var statistics: (commits: Int, largestBatch: Int) {
        condition.lock()
        defer { condition.unlock() }
        return (commits, largestBatch)
    }

    private func run() {
        while true {
            condition.lock()
            while pending.isEmpty && !stopped { condition.wait() }
            if pending.isEmpty && stopped {
                condition.unlock()
                done.signal()
                return
            }
            var take = 1
            var events = pending[0].events.count
            while take < pending.count, events + pending[take].events.count <= Self.maxEventsPerTransaction {
                events += pending[take].events.count
                take += 1
            }
            let batch = Array(pending[0..<take])
            pending.removeFirst(take)
            condition.unlock()
            commit(batch)
        }
    }

    private func commit(_ batch: [Request]) {
        let now = nowMillis()
        do {
            let outcomes: [[AppendOutcome]] = try log.env.write { txn in
                var context = try log.appendContext(in: txn, nowMillis: now, driftMillis: driftMillis)
                let outcomes = try batch.map { request in
                    try request.events.map { try log.append($0, in: txn, context: &context) }
                }
                try log.finish(context, in: txn)
                return outcomes
            }
            condition.lock()
            commits += 1
            largestBatch = max(largestBatch, batch.reduce(0) { $0 + $1.events.count })
            condition.unlock()
            for (request, result) in zip(batch, outcomes) { request.completion(.success(result)) }
        } catch {
            // Nothing in this transaction was committed, so nothing was acknowledged.
            for request in batch { request.completion(.failure(error)) }
        }
    }
}

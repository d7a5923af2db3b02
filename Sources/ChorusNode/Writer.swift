import ChorusEvents
import ChorusLog
import ChorusProjections
import ChorusStorage
import ChorusStore
import Foundation
import Synchronization

/// The single writer (Specs/storage.md §5.1). Requests queue up while a commit is
/// in flight and the next transaction takes all of them at once (group
/// commit). A request's completion runs only after its transaction is
/// durable. No write transaction spans a suspension point: each runs start
/// to finish on the writer's own thread.
final class GroupCommitWriter: Sendable {
    struct Request: Sendable {
        let events: [Event]
        /// Blob bytes committed with the events (a picture and its bytes
        /// become durable together).
        var blobs: [[UInt8]] = []
        /// Other writes that belong in the same transaction (a blob received
        /// from a peer, stored only if still referenced).
        var work: (@Sendable (Transaction) throws -> Void)? = nil
        /// Work that makes its own transactions (a rebuild): runs alone on
        /// the writer's thread, between two group commits.
        var exclusive: (@Sendable () throws -> Void)? = nil
        let completion: @Sendable (Result<[AppendOutcome], any Error>) -> Void
    }

    /// The most events one transaction takes: LMDB keeps a write
    /// transaction's dirty pages in memory, so huge imports commit in slices.
    /// Large, because a commit's cost is mostly the pages it dirties: in a
    /// big store, index entries under random keys (ids, facts) touch a page
    /// each, so the more events share a commit the more share a page; the
    /// batch grows by itself when commits get slower (Specs/storage.md §5.1).
    static let maxEventsPerTransaction = 65_536

    private let thread: BatchingThread<Request>
    private let stats = CommitStatistics()
    /// Told after every durable commit (live sync waits on it).
    let notifier = ArrivalNotifier()

    /// Told, on the writer's thread, of every committed request's events
    /// and their outcomes, before anyone waiting on the commit is.
    typealias CommitListener = @Sendable (_ events: [Event], _ outcomes: [AppendOutcome]) -> Void

    init(store: Store, driftMillis: UInt64, nowMillis: @escaping @Sendable () -> UInt64, committed: @escaping CommitListener = { _, _ in }) {
        let stats = self.stats
        let notifier = self.notifier
        thread = BatchingThread(
            name: "chorus-writer", maxWeight: Self.maxEventsPerTransaction,
            // An exclusive request weighs a whole batch, so it is always alone in one.
            weight: { $0.exclusive == nil ? max(1, $0.events.count) : Self.maxEventsPerTransaction }
        ) { batch in
            Self.commit(
                batch, store: store, now: nowMillis(), driftMillis: driftMillis, stats: stats, notifier: notifier,
                committed: committed)
        }
    }

    /// Queues `events` behind everything already queued (synchronously, so
    /// callers control the order) and calls `completion` once durable.
    func enqueue(
        _ events: [Event], blobs: [[UInt8]] = [], work: (@Sendable (Transaction) throws -> Void)? = nil,
        completion: @escaping @Sendable (Result<[AppendOutcome], any Error>) -> Void
    ) {
        if !thread.enqueue(Request(events: events, blobs: blobs, work: work, completion: completion)) {
            completion(.failure(StorageError.closed))
        }
    }

    /// Runs `job` on the writer's thread once everything queued before it is
    /// committed, with no commit running beside it; completes when it returns.
    func exclusively(_ job: @escaping @Sendable () throws -> Void, completion: @escaping @Sendable (Result<[AppendOutcome], any Error>) -> Void) {
        if !thread.enqueue(Request(events: [], exclusive: job, completion: completion)) {
            completion(.failure(StorageError.closed))
        }
    }

    /// Finishes every queued request, then stops the thread.
    func close() { thread.close() }

    var statistics: WriterStatistics { stats.value }

    private static func commit(
        _ batch: [Request], store: Store, now: UInt64, driftMillis: UInt64,
        stats: CommitStatistics, notifier: ArrivalNotifier, committed: CommitListener
    ) {
        guard
            let error = commitOnce(
                batch, store: store, now: now, driftMillis: driftMillis, stats: stats, notifier: notifier, committed: committed)
        else { return }
        // Nothing in the transaction was committed, so nothing was
        // acknowledged. The requests that shared it are committed again one
        // by one, so that one that cannot be written (a peer's batch the fold
        // refuses) does not fail the others queued beside it.
        guard batch.count > 1 else { return batch[0].completion(.failure(error)) }
        for request in batch {
            commit([request], store: store, now: now, driftMillis: driftMillis, stats: stats, notifier: notifier, committed: committed)
        }
    }

    /// Commits `batch` in one transaction and completes its requests, or
    /// returns why the transaction failed (completing none of them).
    private static func commitOnce(
        _ batch: [Request], store: Store, now: UInt64, driftMillis: UInt64,
        stats: CommitStatistics, notifier: ArrivalNotifier, committed: CommitListener
    ) -> (any Error)? {
        let started = DispatchTime.now().uptimeNanoseconds
        let startedCPU = threadCPUNanoseconds()
        defer {
            stats.addBusy(nanoseconds: DispatchTime.now().uptimeNanoseconds - started, cpu: threadCPUNanoseconds() &- startedCPU)
        }
        if batch.count == 1, let job = batch[0].exclusive {
            do {
                try job()
                notifier.notify()
                batch[0].completion(.success([]))
            } catch {
                batch[0].completion(.failure(error))
            }
            return nil
        }
        do {
            // The log, the blobs and every projection they touch commit in
            // one transaction, so they can never disagree (Specs/storage.md §5).
            let outcomes: [[AppendOutcome]] = try store.commit(nowMillis: now, driftMillis: driftMillis) { commit in
                try batch.map { request in
                    for blob in request.blobs { try commit.putBlob(blob) }
                    try request.work?(commit.transaction)
                    return try request.events.map { try commit.append($0) }
                }
            }
            let size = batch.reduce(0) { $0 + $1.events.count }
            stats.record(batchSize: size)
            NodeMetrics.batchEvents.record(size)
            NodeMetrics.commitSeconds.recordNanoseconds(Int64(DispatchTime.now().uptimeNanoseconds - started))
            let stored = outcomes.joined().count { if case .accepted = $0 { true } else if case .refilled = $0 { true } else { false } }
            if stored > 0 { NodeMetrics.eventsStored.increment(by: stored) }
            for (request, result) in zip(batch, outcomes) { committed(request.events, result) }
            notifier.notify()
            for (request, result) in zip(batch, outcomes) { request.completion(.success(result)) }
            return nil
        } catch {
            return error
        }
    }
}

/// What a node's writer has done: transactions committed, the most events
/// committed in one, and the seconds it spent committing (the whole
/// transaction: feed checks, fold, page writes and flush).
package struct WriterStatistics: Sendable {
    /// Group-commit transactions that committed successfully.
    package var commits = 0
    /// The most events one committed transaction took.
    package var largestBatch = 0
    /// Events offered in committed transactions, duplicates and refused ones included.
    package var events = 0
    /// Seconds the writer's thread spent in commits, failed ones and exclusive work (rebuilds) included.
    package var busySeconds = 0.0
    /// Of those, the seconds it ran on a core (the rest it waited: for the
    /// disk, or for a core other threads held), in the kernel included.
    package var cpuSeconds = 0.0
}

final class CommitStatistics: Sendable {
    private let state = Mutex(WriterStatistics())
    var value: WriterStatistics { state.withLock { $0 } }
    func record(batchSize: Int) {
        state.withLock {
            $0.commits += 1
            $0.events += batchSize
            $0.largestBatch = max($0.largestBatch, batchSize)
        }
    }
    func addBusy(nanoseconds: UInt64, cpu: UInt64) {
        state.withLock {
            $0.busySeconds += Double(nanoseconds) / 1e9
            $0.cpuSeconds += Double(cpu) / 1e9
        }
    }
}

/// The CPU time the calling thread has used.
private func threadCPUNanoseconds() -> UInt64 {
    var now = timespec()
    guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) == 0 else { return 0 }
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

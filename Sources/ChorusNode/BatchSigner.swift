import ChorusCrypto
import ChorusEvents
import ChorusLog
import ChorusStorage
import ChorusParallel
import Foundation

/// Signs this node's own events on all cores and hands them to the writer in
/// the order their headers were built. Headers chain by id, and the id does
/// not depend on the signature, so a feed's events can be signed in parallel
/// while the node builds the next headers (Specs/events.md §3.3).
final class BatchSigner: Sendable {
    struct Job: Sendable {
        let unsigned: UnsignedEvent
        let key: SigningKey
        var blobs: [[UInt8]] = []
        let completion: @Sendable (Result<(Event, AppendOutcome), any Error>) -> Void
    }

    private let thread: BatchingThread<Job>

    init(writer: GroupCommitWriter) {
        // At most one writer transaction's worth per batch, so the writer's cap holds.
        thread = BatchingThread(name: "chorus-signer", maxWeight: GroupCommitWriter.maxEventsPerTransaction, weight: { _ in 1 }) {
            jobs in
            let events: [Event] =
                jobs.count == 1
                ? [jobs[0].unsigned.signed(with: jobs[0].key)]
                : parallelMap(jobs) { $0.unsigned.signed(with: $0.key) }
            // One writer request per batch keeps the feed order intact.
            writer.enqueue(events, blobs: jobs.flatMap(\.blobs)) { result in
                switch result {
                case .success(let outcomes):
                    for (i, job) in jobs.enumerated() { job.completion(.success((events[i], outcomes[i]))) }
                case .failure(let error):
                    for job in jobs { job.completion(.failure(error)) }
                }
            }
        }
    }

    /// Queues a job behind all earlier ones (synchronously, so the caller controls the order).
    func enqueue(_ job: Job) {
        if !thread.enqueue(job) { job.completion(.failure(StorageError.closed)) }
    }

    /// Signs and forwards everything queued, then stops the thread.
    func close() { thread.close() }
}

import ChorusCrypto
import ChorusEvents
import ChorusLog
import Foundation

/// Signs this node's own events on all cores and hands them to the writer in
/// the order their headers were built. Headers chain by id, and the id does
/// not depend on the signature, so a feed's events can be signed in parallel
/// while the node builds the next headers (Specs/events.md §3.3).
final class BatchSigner: @unchecked Sendable {
    // Safety: `pending` and `stopped` are only touched under `condition`.
    struct Job {
        let unsigned: UnsignedEvent
        let key: SigningKey
        let completion: @Sendable (Result<(Event, AppendOutcome), any Error>) -> Void
    }

    private let writer: GroupCommitWriter
    private let condition = NSCondition()
    private var pending: [Job] = []
    private var stopped = false
    private let done = DispatchSemaphore(value: 0)

    init(writer: GroupCommitWriter) {
        self.writer = writer
        let thread = Thread { [self] in run() }
        thread.name = "chorus-signer"
        thread.start()
    }

    /// Queues a job behind all earlier ones (synchronously, so the caller
    /// controls the order).
    func enqueue(_ job: Job) {
        condition.lock()
        if stopped {
            condition.unlock()
            job.completion(.failure(NodeError.closed))
            return
        }
        pending.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Signs and forwards everything queued, then stops the thread.
    func close() {
        condition.lock()
        let wasStopped = stopped
        stopped = true
        condition.signal()
        condition.unlock()
        if !wasStopped { done.wait() }
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
            // At most one writer transaction's worth, so the writer's cap holds.
            let take = min(pending.count, GroupCommitWriter.maxEventsPerTransaction)
            let jobs = Array(pending[0..<take])
            pending.removeFirst(take)
            condition.unlock()

            let events: [Event] =
                jobs.count == 1
                ? [jobs[0].unsigned.signed(with: jobs[0].key)]
                : ParallelMap.run(jobs.map { SignInput(unsigned: $0.unsigned, key: $0.key) }) { $0.unsigned.signed(with: $0.key) }
            // One writer request per batch keeps the feed order intact.
            writer.enqueue(events) { result in
                switch result {
                case .success(let outcomes):
                    for (i, job) in jobs.enumerated() { job.completion(.success((events[i], outcomes[i]))) }
                case .failure(let error):
                    for job in jobs { job.completion(.failure(error)) }
                }
            }
        }
    }

    struct SignInput: Sendable {
        let unsigned: UnsignedEvent
        let key: SigningKey
    }
}

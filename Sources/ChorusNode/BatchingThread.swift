import Foundation

/// A dedicated thread that drains a queue in batches: items queued while a
/// batch is being handled form the next batch, up to `maxWeight` (at least
/// one item). The writer's group commit and the batch signer both run on one.
/// A dedicated thread, rather than the Swift concurrency pool, because the
/// work blocks (fsync) or saturates the cores (signing).
final class BatchingThread<Item: Sendable>: @unchecked Sendable {
    // Safety: `pending` and `stopped` are only touched under `condition`.
    private let condition = NSCondition()
    private var pending: [Item] = []
    private var stopped = false
    private let done = DispatchSemaphore(value: 0)
    private let weight: @Sendable (Item) -> Int
    private let maxWeight: Int
    private let handle: @Sendable ([Item]) -> Void

    init(
        name: String, maxWeight: Int, weight: @escaping @Sendable (Item) -> Int,
        handle: @escaping @Sendable ([Item]) -> Void
    ) {
        self.maxWeight = maxWeight
        self.weight = weight
        self.handle = handle
        let thread = Thread { [self] in
            // The name the kernel shows (top -H, perf): Foundation's
            // `Thread.name` does not set it on Linux.
            #if os(Linux)
            try? Data(name.utf8.prefix(15)).write(to: URL(fileURLWithPath: "/proc/thread-self/comm"))
            #endif
            run()
        }
        thread.name = name
        thread.start()
    }

    /// Queues `item` behind all earlier ones. Returns false, queuing
    /// nothing, once the thread has been closed.
    func enqueue(_ item: Item) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        if stopped { return false }
        pending.append(item)
        condition.signal()
        return true
    }

    /// Handles everything already queued, then stops the thread. Idempotent.
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
            var take = 1
            var total = weight(pending[0])
            while take < pending.count, total + weight(pending[take]) <= maxWeight {
                total += weight(pending[take])
                take += 1
            }
            let batch = Array(pending[0..<take])
            pending.removeFirst(take)
            condition.unlock()
            handle(batch)
        }
    }
}

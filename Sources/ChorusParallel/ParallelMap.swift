import Dispatch
import Foundation
import Synchronization

/// Applies `transform` to every item on all cores and returns the results
/// in input order. For CPU-bound, independent work (signature checks,
/// decoding, signing); the items are split into chunks so each core takes
/// a run of them rather than one at a time.
///
/// The calling thread works through the chunks itself, and the threads of
/// `HelperPool` join it. Not `DispatchQueue.concurrentPerform`: libdispatch
/// gives an apply only the width its root queue has free, and counts a
/// thread blocked in a wait as busy, so an apply started while another
/// stage waits (a rebuild's producer while the writer waits for it) ran on
/// one core.
public func parallelMap<In: Sendable, Out>(
    _ items: [In], chunk: Int = 32, _ transform: @Sendable (In) -> Out
) -> [Out] {
    let count = items.count
    let chunk = max(1, chunk)
    if count <= chunk { return items.map(transform) }
    return [Out](unsafeUninitializedCapacity: count) { buffer, initialized in
        guard let base = buffer.baseAddress else { return }
        let slots = Slots(base: base)
        withoutActuallyEscaping(transform) { transform in
            HelperPool.shared.run(chunks: (count + chunk - 1) / chunk) { c in
                for i in (c * chunk)..<min(count, (c + 1) * chunk) {
                    (slots.base + i).initialize(to: transform(items[i]))
                }
            }
        }
        initialized = count
    }
}

/// Runs synchronous work (a store scan, a `parallelMap`) on a dispatch
/// thread and resumes the caller with its result: off the Swift
/// concurrency pool, whose few threads it would otherwise hold, and off
/// the caller's actor, which keeps serving meanwhile.
public func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global(qos: .userInitiated).async { continuation.resume(with: Result { try body() }) }
    }
}

/// `offThePool` for work that cannot fail.
public func offThePool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        DispatchQueue.global(qos: .userInitiated).async { continuation.resume(returning: body()) }
    }
}

/// The output buffer, shared by the chunks: each writes only its own
/// slots, so no two threads touch the same memory.
private struct Slots<T>: @unchecked Sendable {
    let base: UnsafeMutablePointer<T>
}

/// Threads, one fewer than the active processors, that help whoever is
/// running chunks of work in `run`. Helping is best effort: the caller
/// takes chunks too, so a call finishes even when every helper is busy
/// with another call (or nested inside one), and nothing ever waits for a
/// helper to start.
final class HelperPool: Sendable {
    static let shared = HelperPool(threads: max(0, ProcessInfo.processInfo.activeProcessorCount - 1))

    private let threads: Int
    /// Calls wanting help, one entry per helper wanted.
    private let wanted = Mutex<[Job]>([])
    private let posted = DispatchSemaphore(value: 0)

    private init(threads: Int) {
        self.threads = threads
        for n in 0..<threads {
            let thread = Thread { [self] in
                #if os(Linux)
                // The name the kernel shows (top -H, perf).
                try? Data("chorus-help-\(n)".utf8.prefix(15)).write(to: URL(fileURLWithPath: "/proc/thread-self/comm"))
                #endif
                while true {
                    posted.wait()
                    wanted.withLock { $0.popLast() }?.work()
                }
            }
            thread.start()
        }
    }

    /// Calls `body` once with each of `0 ..< chunks`, on this thread and
    /// any free helpers, and returns when every call has returned. `body`
    /// is not kept after that.
    func run(chunks: Int, _ body: @escaping @Sendable (Int) -> Void) {
        let job = Job(chunks: chunks, body: body)
        let helpers = min(threads, chunks - 1)
        if helpers > 0 {
            wanted.withLock { $0.insert(contentsOf: repeatElement(job, count: helpers), at: 0) }
            for _ in 0..<helpers { posted.signal() }
        }
        job.work()
        job.finished.wait()
        job.release()
    }

    /// One `run` call: its chunks are claimed in order by whoever works on it.
    private final class Job: Sendable {
        let chunks: Int
        private let next = Atomic<Int>(0)
        private let completed = Atomic<Int>(0)
        /// Cleared once every chunk has run, so a helper that takes the job
        /// late keeps none of the caller's captures alive. The closure sits
        /// in a box, and the lock hands out the box: a closure read through
        /// `withLock`'s generic `inout` is converted to the generic form and
        /// back, and the converted one is written back, so each read wrapped
        /// the stored closure in two more thunks, and every chunk called
        /// through all the layers added before it (quadratic in the chunks).
        private let body: Mutex<Body?>
        /// Signalled once, by whoever completes the last chunk.
        let finished = DispatchSemaphore(value: 0)

        private final class Body: Sendable {
            let call: @Sendable (Int) -> Void
            init(_ call: @escaping @Sendable (Int) -> Void) { self.call = call }
        }

        init(chunks: Int, body: @escaping @Sendable (Int) -> Void) {
            self.chunks = chunks
            self.body = Mutex(Body(body))
        }

        func work() {
            while true {
                let c = next.wrappingAdd(1, ordering: .relaxed).oldValue
                if c >= chunks { return }
                // A chunk is claimed before the last one completes, so the
                // body is still there; the copy ends with this scope,
                // before the chunk counts as completed.
                do {
                    guard let body = body.withLock({ $0 }) else { return }
                    body.call(c)
                }
                if completed.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue == chunks { finished.signal() }
            }
        }

        func release() { body.withLock { $0 = nil } }
    }
}

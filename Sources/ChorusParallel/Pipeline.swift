import Dispatch
import Foundation
import Synchronization

/// Runs a sequence of steps in two stages that overlap: while `consume`
/// handles step n on the calling thread, `produce` prepares step n + 1 on
/// another thread. For work whose stages are independent (a rebuild reads
/// and decodes the next slice of the log while the current one is folded
/// and written in the single write transaction).
///
/// `produce` is called with `start`, then with each `next` it returns,
/// until it returns nil; its calls never overlap. Whatever either stage
/// throws ends the pipeline: it is rethrown here, after the producer has
/// stopped, so nothing it reads outlives the call.
public func pipelined<Step: Sendable, Output: Sendable>(
    from start: Step,
    produce: @escaping @Sendable (Step) throws -> (output: Output, next: Step?)?,
    consume: (Output) throws -> Void
) throws {
    var pending: Background<(output: Output, next: Step?)?>? = Background { try produce(start) }
    defer { _ = try? pending?.wait() }
    while let current = pending {
        pending = nil
        guard let (output, next) = try current.wait() else { return }
        if let next { pending = Background { try produce(next) } }
        try consume(output)
    }
}

/// Like `pipelined(from:produce:consume:)`, for a producer in two parts:
/// `plan`, which is cheap and says which step follows (called in turn on
/// the calling thread), and `build`, the costly part, of which up to
/// `ahead` run at once on threads of their own while `consume` handles
/// the outputs in order. For a `build` that is partly serial (reading a
/// slice) and partly on all cores (folding it): one build at a time left
/// the cores idle in its serial part.
///
/// Whatever a stage throws ends the pipeline and is rethrown here after
/// every started build has finished.
public func pipelined<Step: Sendable, Plan: Sendable, Output: Sendable>(
    from start: Step,
    ahead: Int = 2,
    plan: (Step) throws -> (plan: Plan, next: Step?)?,
    build: @escaping @Sendable (Plan) throws -> Output,
    consume: (Output) throws -> Void
) throws {
    var building: [Background<Output>] = []
    defer { for b in building { _ = try? b.wait() } }
    var step: Step? = start
    func startBuilds() throws {
        while building.count < max(1, ahead), let current = step {
            guard let (planned, next) = try plan(current) else {
                step = nil
                return
            }
            step = next
            building.append(Background { try build(planned) })
        }
    }
    try startBuilds()
    while !building.isEmpty {
        let output = try building[0].wait()
        building.removeFirst()
        try startBuilds()
        try consume(output)
    }
}

/// Work started at once on a thread of its own, whose result (or error) is
/// waited for later: for independent stages that can overlap (a replay
/// verification checks the feeds while the copy of the log is folded).
/// Waiting more than once returns the same result.
///
/// Not a global dispatch queue: libdispatch counts a worker blocked in a
/// wait (a stage waiting for the one before it) as busy, so with as many
/// such stages as cores, the next one did not start for seconds.
public final class Background<T: Sendable>: Sendable {
    private let result = Mutex<Result<T, any Error>?>(nil)
    private let done = DispatchSemaphore(value: 0)

    public init(_ work: @escaping @Sendable () throws -> T) {
        let work = HandOff(work)
        let thread = Thread { [self] in
            let r = work.run()
            result.withLock { $0 = r }
            done.signal()
        }
        thread.stackSize = 8 << 20  // a fold recurses through CBOR; Darwin gives secondary threads 512 KiB
        thread.start()
    }

    /// Blocks until the work has finished; returns its result or rethrows
    /// its error.
    public func wait() throws -> T {
        done.wait()
        return try finished()
    }

    /// `wait()`, calling `tick` every `interval` seconds until the work has
    /// finished (to show its progress from the waiting thread).
    public func wait(tickingEvery interval: Double, _ tick: () -> Void) throws -> T {
        while done.wait(timeout: .now() + interval) == .timedOut { tick() }
        return try finished()
    }

    /// The result, once `done` has been taken.
    private func finished() throws -> T {
        done.signal()  // a later wait returns at once
        return try (result.withLock { $0 } ?? .failure(CancellationError())).get()
    }
}

/// Work handed to a thread of its own, released by that thread as soon as
/// it has run: Foundation keeps a `Thread`'s block, and whatever it
/// captured, until the thread is torn down, after the waiter has resumed.
/// An LMDB environment captured that way closed late, on that thread, and
/// the same store could not be opened again meanwhile ("already open in
/// this process").
public final class HandOff<T: Sendable>: Sendable {
    private let work: Mutex<(@Sendable () throws -> T)?>

    public init(_ work: @escaping @Sendable () throws -> T) { self.work = Mutex(work) }

    /// Runs the work (once; later calls fail with `CancellationError`) and
    /// releases it, and what it captured, before returning its result.
    public func run() -> Result<T, any Error> {
        guard let body = work.withLock({ w in defer { w = nil }; return w }) else { return .failure(CancellationError()) }
        return Result { try body() }
    }
}

import Dispatch
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
    var pending: Handoff<(output: Output, next: Step?)?>? = Handoff(start, produce)
    defer { _ = pending?.wait() }
    while let current = pending {
        pending = nil
        guard let (output, next) = try current.wait().get() else { return }
        if let next { pending = Handoff(next, produce) }
        try consume(output)
    }
}

/// One step's result, produced on a global queue and waited for once.
private final class Handoff<T: Sendable>: Sendable {
    private let result = Mutex<Result<T, any Error>?>(nil)
    private let done = DispatchSemaphore(value: 0)

    init<Step: Sendable>(_ step: Step, _ produce: @escaping @Sendable (Step) throws -> T) {
        DispatchQueue.global().async { [self] in
            let r = Result { try produce(step) }
            result.withLock { $0 = r }
            done.signal()
        }
    }

    func wait() -> Result<T, any Error> {
        done.wait()
        done.signal()  // a second wait (the deferred one) returns at once
        return result.withLock { $0 } ?? .failure(CancellationError())
    }
}

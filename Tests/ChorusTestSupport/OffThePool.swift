import Foundation

/// Runs `body` on a thread of its own and awaits its result, once one of
/// `HeavyWork.slots` is free.
///
/// Swift Testing runs every test as a task on the cooperative pool, which
/// has one thread per core. A test that computes for seconds without
/// suspending (a property test) or blocks on a child process would hold
/// one of them, and the tasks of every other test would stand still. On a
/// thread of its own the work shares the cores through the kernel's
/// scheduler instead; the slots keep such work to one job per core, so
/// the tests whose waits are bounded (sync sessions, handshakes) keep a
/// fair share of the machine while dozens of command-line tests run.
/// `body` runs outside the test's task: it returns what to record instead
/// of calling `Issue.record` or `#expect`.
public func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    await HeavyWork.slots.acquire()
    let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, any Error>, Never>) in
        Thread { continuation.resume(returning: Result { try body() }) }.start()
    }
    await HeavyWork.slots.release()
    return try result.get()
}

/// The slots `offThePool` takes: as many as the machine has cores.
public enum HeavyWork {
    public static let slots = Slots(ProcessInfo.processInfo.activeProcessorCount)
}

/// A counting semaphore whose waiters suspend instead of blocking a thread;
/// they are served in arrival order.
public actor Slots {
    private var free: Int
    private var waiting: [CheckedContinuation<Void, Never>] = []

    public init(_ count: Int) { free = max(1, count) }

    public func acquire() async {
        if free > 0 {
            free -= 1
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    public func release() {
        if waiting.isEmpty {
            free += 1
        } else {
            waiting.removeFirst().resume()
        }
    }
}

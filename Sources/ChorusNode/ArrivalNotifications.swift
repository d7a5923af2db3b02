import Dispatch
import Synchronization

/// Wakes whoever waits for new events in a store (live sync pushes them to
/// connected peers). The node's group-commit writer notifies after every
/// durable write transaction; subscribers then read the arrival log
/// themselves, so a notification carries nothing and many commits coalesce
/// into one wake-up.
package final class ArrivalNotifier: Sendable {
    private let subscribers = Mutex<(next: Int, all: [Int: AsyncStream<Void>.Continuation], finished: Bool)>((0, [:], false))

    init() {}

    /// A stream that yields after each commit (coalesced: at most one wake-up
    /// is buffered). It ends when the consuming task is cancelled.
    package func subscribe() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let id = subscribers.withLock { s -> Int? in
            if s.finished { return nil }
            let id = s.next
            s.next += 1
            s.all[id] = continuation
            return id
        }
        guard let id else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.all.removeValue(forKey: id) }
        }
        return stream
    }

    private let lastNotified = Atomic<UInt64>(0)

    /// When the last commit was announced (`DispatchTime` uptime nanoseconds;
    /// 0 before the first): observation latency is measured from it.
    package var lastCommitUptimeNanoseconds: UInt64 { lastNotified.load(ordering: .acquiring) }

    func notify() {
        lastNotified.store(DispatchTime.now().uptimeNanoseconds, ordering: .releasing)
        let all = subscribers.withLock { Array($0.all.values) }
        for c in all { c.yield() }
    }

    /// Ends every subscription (the node closed).
    func finishAll() {
        let all = subscribers.withLock { s in
            defer {
                s.all.removeAll()
                s.finished = true
            }
            return Array(s.all.values)
        }
        for c in all { c.finish() }
    }
}

extension Node {
    /// Notifications of new arrivals in this node's log (appends and
    /// ingests). A read-only node commits nothing, so its notifier stays quiet.
    package nonisolated var arrivalNotifier: ArrivalNotifier { writerNotifier }
}

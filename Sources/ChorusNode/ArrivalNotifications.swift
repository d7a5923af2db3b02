import ChorusStorage
import Synchronization

/// Wakes whoever waits for new events in a store (live sync pushes them to
/// connected peers). The group-commit writer calls `committed(_:)` after
/// every durable write transaction (the one-line hook in Writer.swift);
/// subscribers then read the arrival log themselves, so a notification
/// carries nothing and many commits coalesce into one wake-up.
public final class ArrivalNotifier: Sendable {
    private let subscribers = Mutex<(next: Int, all: [Int: AsyncStream<Void>.Continuation])>((0, [:]))

    init() {}

    /// A stream that yields after each commit (coalesced: at most one wake-up
    /// is buffered). It ends when the consuming task is cancelled.
    public func subscribe() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let id = subscribers.withLock { s in
            let id = s.next
            s.next += 1
            s.all[id] = continuation
            return id
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.all.removeValue(forKey: id) }
        }
        return stream
    }

    func notify() {
        let all = subscribers.withLock { Array($0.all.values) }
        for c in all { c.yield() }
    }

    /// One notifier per open environment, found by identity.
    private static let registry = Mutex<[ObjectIdentifier: (env: WeakEnvironment, notifier: ArrivalNotifier)]>([:])

    struct WeakEnvironment: @unchecked Sendable { weak var env: Environment? }

    static func notifier(for env: Environment) -> ArrivalNotifier {
        registry.withLock { table in
            let key = ObjectIdentifier(env)
            if let entry = table[key], entry.env.env === env { return entry.notifier }
            table = table.filter { $0.value.env.env != nil }
            let n = ArrivalNotifier()
            table[key] = (WeakEnvironment(env: env), n)
            return n
        }
    }

    /// The writer's hook: a transaction on `env` committed.
    static func committed(_ env: Environment) {
        let n = registry.withLock { table -> ArrivalNotifier? in
            guard let entry = table[ObjectIdentifier(env)], entry.env.env === env else { return nil }
            return entry.notifier
        }
        n?.notify()
    }
}

extension Node {
    /// Notifications of new arrivals in this node's log (appends and ingests).
    public nonisolated var arrivalNotifier: ArrivalNotifier { ArrivalNotifier.notifier(for: log.env) }
}

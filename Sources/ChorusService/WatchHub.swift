import ChorusCrypto
import Foundation
import Synchronization

/// One observation per distinct watched query, shared by all its watchers
/// (Specs/api.md §6): a commit reads each distinct query once, whatever the
/// number of watchers, and each watcher gets the newest answer (a slow
/// reader skips answers, never falls behind).
final class WatchHub: Sendable {
    /// One answer of a watched query: its exit status (0 for an answer, 1
    /// for an error), its JSON, and its id, a hash of both, so a client that
    /// resumes with `Last-Event-ID` is not sent the answer it holds.
    struct Answer: Equatable, Sendable {
        let status: Int32
        let output: Data
        let id: String

        init(status: Int32, output: Data) {
            self.status = status
            self.output = output
            id = String(Blake2b.hash256([UInt8(truncatingIfNeeded: status)] + Array(output)).hex.prefix(24))
        }
    }

    private struct Entry {
        /// Which observation this is, so that one that ended does not touch its successor under the same key.
        let generation: Int
        var watchers: [Int: AsyncStream<Answer>.Continuation] = [:]
        var latest: Answer?
        var task: Task<Void, Never>?
    }

    private let entries = Mutex<[String: Entry]>([:])
    private let nextWatcher = Atomic<Int>(0)

    /// Distinct queries observed now (for metrics and tests).
    var queries: Int { entries.withLock { $0.count } }
    /// Watchers now.
    var watchers: Int { entries.withLock { $0.values.reduce(0) { $0 + $1.watchers.count } } }

    /// The answers of the query `key`: its latest answer at once when
    /// another watcher observes it already, then each new one. `observe`
    /// starts the query's observation when it has no watcher yet; it is
    /// cancelled when its last watcher leaves.
    func subscribe(_ key: String, observe: @escaping @Sendable () -> AsyncThrowingStream<Answer, any Error>) -> AsyncStream<Answer> {
        let (stream, continuation) = AsyncStream.makeStream(of: Answer.self, bufferingPolicy: .bufferingNewest(1))
        let id = nextWatcher.wrappingAdd(1, ordering: .relaxed).oldValue
        let (isNew, generation) = entries.withLock { all in
            let isNew = all[key] == nil
            var entry = all[key] ?? Entry(generation: id)
            entry.watchers[id] = continuation
            if let latest = entry.latest { continuation.yield(latest) }
            all[key] = entry
            return (isNew, entry.generation)
        }
        continuation.onTermination = { [weak self] _ in self?.leave(key, id) }
        if isNew {
            let task = Task { [weak self] in
                do {
                    for try await answer in observe() { self?.publish(key, generation, answer) }
                } catch {}
                self?.finish(key, generation)
            }
            let kept = entries.withLock { all in
                guard all[key]?.generation == generation, all[key]?.task == nil else { return false }
                all[key]?.task = task
                return true
            }
            // Every watcher left already, or another observation serves the key.
            if !kept { task.cancel() }
        }
        return stream
    }

    private func publish(_ key: String, _ generation: Int, _ answer: Answer) {
        let watchers = entries.withLock { all -> [AsyncStream<Answer>.Continuation] in
            guard all[key]?.generation == generation else { return [] }
            all[key]?.latest = answer
            return Array(all[key]?.watchers.values ?? [:].values)
        }
        for watcher in watchers { watcher.yield(answer) }
    }

    private func leave(_ key: String, _ id: Int) {
        let task = entries.withLock { all -> Task<Void, Never>? in
            all[key]?.watchers[id] = nil
            guard let entry = all[key], entry.watchers.isEmpty else { return nil }
            all[key] = nil
            return entry.task
        }
        task?.cancel()
    }

    /// The observation ended (the node closed): its watchers end too.
    private func finish(_ key: String, _ generation: Int) {
        let watchers = entries.withLock { all -> [AsyncStream<Answer>.Continuation] in
            guard all[key]?.generation == generation else { return [] }
            let entry = all.removeValue(forKey: key)
            return Array(entry?.watchers.values ?? [:].values)
        }
        for watcher in watchers { watcher.finish() }
    }
}

import Foundation
import Synchronization

extension Array {
    func chunked(_ size: Int) -> [[Element]] {
        stride(from: 0, to: count, by: size).map { Array(self[$0..<Swift.min(count, $0 + size)]) }
    }
}

/// Runs `body`, failing with `SyncError.timeout` after `limit`; then
/// `onTimeout` must make `body` return (by closing its transport).
func withTimeout<T: Sendable>(
    _ limit: Duration, _ what: String, onTimeout: @escaping @Sendable () async -> Void,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    // `onTimeout` closes the transport, so `body` may end first (a receive
    // reading the close as nil): the flag, not which task finished first,
    // says the limit passed.
    let expired = TimeoutFlag()
    return try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            expired.value.store(true, ordering: .sequentiallyConsistent)
            await onTimeout()
            return nil
        }
        defer { group.cancelAll() }
        let first: T??
        do { first = try await group.next() } catch {
            if expired.value.load(ordering: .sequentiallyConsistent) { throw SyncError.timeout(what) }
            throw error
        }
        guard let first, let value = first, !expired.value.load(ordering: .sequentiallyConsistent) else { throw SyncError.timeout(what) }
        return value
    }
}

/// Set once a `withTimeout` limit has passed.
private final class TimeoutFlag: Sendable {
    let value = Atomic<Bool>(false)
}


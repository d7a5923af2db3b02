import Foundation

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
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            await onTimeout()
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next() else { throw SyncError.timeout(what) }
        guard let value = first else { throw SyncError.timeout(what) }
        return value
    }
}


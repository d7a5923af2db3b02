import Dispatch
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

/// Runs a synchronous store scan on a dispatch thread, so the session's
/// actor keeps serving the peer meanwhile: a scan of every picture and
/// message record held the actor, and with it the events it was sending,
/// for tens of milliseconds at 200,000 events.
func offTheActor<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global(qos: .userInitiated).async { continuation.resume(with: Result { try body() }) }
    }
}

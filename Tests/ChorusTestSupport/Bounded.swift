/// A bounded wait that ran out.
public struct BoundExceeded: Error, CustomStringConvertible {
    /// What did not finish, and the limit.
    public let message: String
    /// The message.
    public var description: String { message }
}

/// Fails the test instead of hanging when `body` takes longer than `limit`.
/// A limit catches a hang, not slowness: in a full parallel test run on two
/// cores, a sync that takes 0.5 s alone has taken over 30 s, so limits on
/// network work are 120 s (a 5 s blob sync once passed 60 s there).
public func bounded<T: Sendable>(_ limit: Duration, _ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try? await Task.sleep(for: limit)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else {
            throw BoundExceeded(message: "\(what) did not finish within \(limit)")
        }
        return value
    }
}


/// Asks `probe` until it answers (non-nil), pausing `every` between asks,
/// for at most `limit`: for what another process does on its own schedule.
public func waitFor<T: Sendable>(
    _ limit: Duration, _ what: String, every: Duration = .milliseconds(250), _ probe: @escaping @Sendable () async throws -> T?
) async throws -> T {
    try await bounded(limit, what) {
        while true {
            if let value = try await probe() { return value }
            try await Task.sleep(for: every)
        }
    }
}

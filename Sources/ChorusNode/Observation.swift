import Foundation

extension Node {
    /// Observes a value read from this node: the stream yields the current
    /// value at once, then a new value after each commit that changed it
    /// (equal values are not repeated), like a live query. A screen keeps
    /// one open while it shows the value:
    ///
    /// ```swift
    /// for try await page in node.observe({ try $0.readableChatPage(chat, limit: 50) }) {
    ///     render(page)
    /// }
    /// ```
    ///
    /// `read` runs once per commit of this node (local mutations, ingests,
    /// sync), never concurrently with itself; a consumer slower than the
    /// commits sees the newest value, not every intermediate one. The stream
    /// ends when the consuming task is cancelled or the node closes, and
    /// throws what `read` throws. A read-only node commits nothing, so its
    /// observers see only the first value.
    public nonisolated func observe<Value: Equatable & Sendable>(
        _ read: @escaping @Sendable (Node) async throws -> Value
    ) -> AsyncThrowingStream<Value, any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: Value.self, bufferingPolicy: .bufferingNewest(1))
        // Subscribed before the first read, so no commit slips between.
        let commits = arrivalNotifier.subscribe()
        let task = Task { [self] in
            do {
                var last = try await read(self)
                continuation.yield(last)
                for await _ in commits {
                    let value = try await read(self)
                    if value != last {
                        last = value
                        continuation.yield(value)
                    }
                }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }
}

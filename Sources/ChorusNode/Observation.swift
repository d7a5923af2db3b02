import ChorusParallel
import ChorusStorage
import Synchronization
import Foundation

/// Runs a read that can take more than a millisecond (a photo's bytes, a
/// decryption) on a dispatch thread instead of the caller's, carrying the
/// caller's read recorder along so an observation still sees what it read.
func offTheCaller<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    let recorder = ReadTracking.recorder
    return try await offThePool { try ReadTracking.$recorder.withValue(recorder) { try body() } }
}

/// Byte reads (a picture's, an attachment's) that ran on the main thread:
/// none should; a test reads from the main actor and checks.
package let mainThreadByteReads = Atomic<Int>(0)

/// Counts a byte read on the main thread.
func countMainThreadByteRead() {
    if Thread.isMainThread { mainThreadByteReads.add(1, ordering: .relaxed) }
}

extension Node {
    /// Observes a value read from this node: the stream yields the current
    /// value at once, then a new value after each commit that changed what
    /// the last read read (equal values are not repeated), like a live
    /// query. A screen keeps one open while it shows the value:
    ///
    /// ```swift
    /// for try await page in node.observe({ try $0.readableChatPage(chat, limit: 50) }) {
    ///     render(page)
    /// }
    /// ```
    ///
    /// A value made of several reads is read from one snapshot inside
    /// `read(_:)`, so it is never half of one commit and half of the next:
    ///
    /// ```swift
    /// struct PictureScreen: Equatable { var picture: PictureLookup; var likes: [UserID] }
    /// node.observe { node in try node.read { PictureScreen(picture: try node.picture(id), likes: try node.likes(of: id)) } }
    /// ```
    ///
    /// Every key `read` reads from the store is recorded, and `read` runs
    /// again only when a commit (a local mutation, an ingest, a sync) wrote
    /// inside what it read last time, as GRDB's ValueObservation tracks the
    /// regions a request read (Specs/storage.md §8): an observation of one
    /// profile does not wake for likes of other pictures. `read` never runs
    /// concurrently with itself; a consumer slower than the commits sees the
    /// newest value, not every intermediate one. The stream ends when the
    /// consuming task is cancelled or the node closes, and throws what
    /// `read` throws. A read-only node commits nothing, so its observers see
    /// only the first value.
    public nonisolated func observe<Value: Equatable & Sendable>(
        _ read: @escaping @Sendable (Node) async throws -> Value
    ) -> AsyncThrowingStream<Value, any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: Value.self, bufferingPolicy: .bufferingNewest(1))
        let task = Task { [self] in
            do {
                var last: Value? = nil
                for try await value in observeReads(read) where value != last {
                    last = value
                    continuation.yield(value)
                }
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// Runs `read` at once and again each time a commit touches what its
    /// previous run read, yielding every result (equal ones too); how many
    /// times it ran is what `observe` saves. Ends when the consuming task is
    /// cancelled or the store closes.
    package nonisolated func observeReads<Value: Sendable>(
        _ read: @escaping @Sendable (Node) async throws -> Value
    ) -> AsyncThrowingStream<Value, any Error> {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: Value.self, bufferingPolicy: .bufferingNewest(1))
        let (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        // Opened before the first read, so a commit during it is matched.
        let observation = log.env.regionObservers.open { wake.yield() }
        let task = Task { [self] in
            defer { observation.close() }
            do {
                var pending = wakes.makeAsyncIterator()
                repeat {
                    guard observation.isOpen else { break }
                    let value = try await observation.watching { try await read(self) }
                    continuation.yield(value)
                } while await pending.next() != nil
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        continuation.onTermination = { _ in
            task.cancel()
            wake.finish()
        }
        return stream
    }
}

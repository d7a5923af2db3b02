import ChorusTestSupport
import Testing

@testable import ChorusSync

/// The small waiting types a sync session and a connection share
/// (`Sources/ChorusSync/Transport/Waiting.swift`), without a session.
@Suite("Waiting primitives")
struct WaitingTests {
    @Test("a queue hands messages in order to its reader, keeps them while nobody waits, takes some back in front, and ends with nil")
    func queueOrder() async throws {
        let queue = AsyncQueue<Int>()
        #expect(queue.isEmpty && !queue.isFinished)
        queue.push(1)
        queue.push(2)
        #expect(await queue.next() == 1)
        // Set aside and handed back: they come first again, in their order.
        queue.push(3)
        queue.pushFront([0, 1])
        #expect(await queue.next() == 0)
        #expect(await queue.next() == 1)
        #expect(await queue.next() == 2)
        #expect(await queue.next() == 3)
        #expect(queue.isEmpty)
        // A waiting reader gets the next push.
        let reader = Task { await queue.next() }
        _ = try await waitFor(.seconds(120), "the reader to wait", every: .milliseconds(2)) { queue.hasReader ? true : nil }
        queue.push(4)
        #expect(await reader.value == 4)
        // Finished: what is left first, then nil, and a waiting reader is woken with nil.
        queue.push(5)
        queue.finish()
        queue.push(6)
        #expect(await queue.next() == 5)
        #expect(await queue.next() == 6)
        #expect(await queue.next() == nil)
        let other = AsyncQueue<Int>()
        let waiting = Task { await other.next() }
        other.finish()
        #expect(await waiting.value == nil)
    }

    @Test("a wakeup is never lost: a wake before the wait is kept for it; once cancelled, every wait throws")
    func wakeup() async throws {
        let wakeup = Wakeup()
        wakeup.wake()
        try await wakeup.wait()  // the kept wake
        let waiter = Task { try await wakeup.wait() }
        _ = try await waitFor(.seconds(120), "the waiter", every: .milliseconds(2)) { wakeup.hasWaiter ? true : nil }
        wakeup.wake()
        try await waiter.value
        let cancelled = Task { try await wakeup.wait() }
        _ = try await waitFor(.seconds(120), "the waiter", every: .milliseconds(2)) { wakeup.hasWaiter ? true : nil }
        wakeup.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        await #expect(throws: CancellationError.self) { try await wakeup.wait() }
    }

    @Test("a latch lets its waiters through when it opens, and everyone after")
    func latch() async {
        let latch = Latch()
        #expect(!latch.isOpen)
        let waiters = (0..<3).map { _ in Task { await latch.wait() } }
        latch.open()
        for w in waiters { await w.value }
        await latch.wait()
        #expect(latch.isOpen)
    }

    @Test("an outcome is settled once: its waiters and every later one get the first result, a second settle changes nothing")
    func outcome() async throws {
        let outcome = Outcome<Int, SecureConnectionError>()
        #expect(outcome.result == nil)
        let waiters = (0..<3).map { _ in Task { try await outcome.value() } }
        #expect(outcome.settle(.success(7)))
        #expect(!outcome.settle(.failure(.closed)))
        for w in waiters { #expect(try await w.value == 7) }
        #expect(try await outcome.value() == 7)

        let failed = Outcome<Int, SecureConnectionError>()
        failed.settle(.failure(.handshakeTimeout))
        await #expect(throws: SecureConnectionError.handshakeTimeout) { try await failed.value() }
    }
}

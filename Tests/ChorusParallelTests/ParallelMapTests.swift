import ChorusParallel
import Dispatch
import Foundation
import Synchronization
import Testing

@Suite("Mapping on all cores (ChorusParallel)")
struct ParallelMapTests {
    @Test("results come back in input order, with nested and concurrent calls", arguments: [1, 7, 64])
    func order(chunk: Int) {
        let items = Array(0..<5_000)
        let results = Mutex<[[Int]]>([])
        DispatchQueue.concurrentPerform(iterations: 3) { _ in
            let mapped = parallelMap(items, chunk: chunk) { i in
                // Nested: each item maps a small array of its own.
                parallelMap(Array(0..<(i % 5 + 2)), chunk: 1) { i * 10 + $0 }.reduce(0, +)
            }
            results.withLock { $0.append(mapped) }
        }
        let expected = items.map { i in (0..<(i % 5 + 2)).map { i * 10 + $0 }.reduce(0, +) }
        let all = results.withLock { $0 }
        #expect(all.count == 3)
        for mapped in all { #expect(mapped == expected) }
    }

    /// The helpers read the work closure once per chunk. Read through a
    /// lock's generic `inout`, it was converted to the generic form and back
    /// and written back each time, two more thunks a chunk: the ingest's
    /// and the verify pass's chunks called through thousands of layers (2.6
    /// of an ingest's 53 core-seconds). On a thread with a small stack the
    /// layers overflow it within a few thousand chunks; one layer does not.
    @Test("a chunk's call goes through no more layers however many chunks came before")
    func theWorkIsNotWrappedAgainForEachChunk() {
        let done = DispatchSemaphore(value: 0)
        let sum = Mutex(0)
        let thread = Thread {
            let mapped = parallelMap(Array(0..<40_000), chunk: 1) { $0 }
            sum.withLock { $0 = mapped.reduce(0, +) }
            done.signal()
        }
        thread.stackSize = 128 << 10
        thread.start()
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(sum.withLock { $0 } == (0..<40_000).reduce(0, +))
    }

    @Test("a second core joins even while every dispatch worker is blocked")
    func helpersJoinWhileDispatchIsBlocked() throws {
        let cores = ProcessInfo.processInfo.activeProcessorCount
        try #require(cores >= 2, "needs two cores")
        // Occupy as many global-queue workers as there are cores, each
        // blocked in a wait, as a pipeline's waiting stage is. An apply
        // from libdispatch would then run serially.
        let release = DispatchSemaphore(value: 0)
        let blocked = DispatchSemaphore(value: 0)
        for _ in 0..<cores {
            DispatchQueue.global().async {
                blocked.signal()
                release.wait()
            }
        }
        defer { for _ in 0..<cores { release.signal() } }
        for _ in 0..<cores { #expect(blocked.wait(timeout: .now() + 30) == .success) }
        // Each of the two chunks waits (bounded) until a chunk has run on
        // another thread than its own.
        let threads = Mutex<Set<UInt>>([])
        let seen = parallelMap([0, 1], chunk: 1) { _ -> Int in
            let me = UInt(pthread_self())
            threads.withLock { _ = $0.insert(me) }
            let deadline = Date().addingTimeInterval(20)
            while threads.withLock({ $0.count }) < 2 && Date() < deadline { usleep(1_000) }
            return threads.withLock { $0.count }
        }
        #expect(seen == [2, 2])
    }
}
